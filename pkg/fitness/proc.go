package fitness

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// ProcFS describes processes from /proc (Root prefixes it, for tests).
type ProcFS struct {
	Root string
}

// Describe reads /proc/PID/cmdline (arguments joined by spaces, cut at 200 bytes) and the
// systemd unit named by /proc/PID/cgroup.
func (p ProcFS) Describe(pid uint32) (string, string) {
	dir := filepath.Join(p.Root, "/proc", strconv.FormatUint(uint64(pid), 10))
	var cmd string
	if b, err := safefile.ReadRegular(filepath.Join(dir, "cmdline"), 64<<10); err == nil {
		cmd = strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		if len(cmd) > 200 {
			cmd = cmd[:200] + "..."
		}
	} else if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		// /proc files are not regular in every kernel's eyes: read them plainly, bounded.
		if len(b) > 64<<10 {
			b = b[:64<<10]
		}
		cmd = strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	var unit string
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		unit = UnitOfCgroup(string(b))
	}
	return cmd, unit
}

// UnitOfCgroup returns the systemd service or scope a /proc/PID/cgroup text names: the
// last path element ending in .service or .scope ("0::/system.slice/qwen.service" gives
// "qwen.service"); "" when there is none.
func UnitOfCgroup(text string) string {
	unit := ""
	for _, line := range strings.Split(text, "\n") {
		// "hierarchy-ID:controllers:path"; cgroup v2 is "0::path".
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, el := range strings.Split(parts[2], "/") {
			if strings.HasSuffix(el, ".service") || strings.HasSuffix(el, ".scope") {
				unit = el
			}
		}
		if unit != "" && parts[0] == "0" {
			return unit
		}
	}
	return unit
}
