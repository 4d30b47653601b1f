package fitness

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/portowner"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// ProcFS describes processes from /proc (Root prefixes it, for tests).
type ProcFS struct {
	Root string
}

// Describe reads /proc/PID/cmdline (arguments joined by spaces, cut at 200 bytes) and the
// systemd unit named by /proc/PID/cgroup, each read bounded to 64 KiB.
func (p ProcFS) Describe(pid uint32) (string, string) {
	dir := filepath.Join(p.Root, "/proc", strconv.FormatUint(uint64(pid), 10))
	var cmd string
	if b, err := readBounded(filepath.Join(dir, "cmdline")); err == nil {
		cmd = strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		if len(cmd) > 200 {
			cmd = cmd[:200] + "..."
		}
	}
	var unit string
	if b, err := readBounded(filepath.Join(dir, "cgroup")); err == nil {
		unit = UnitOfCgroup(string(b))
	}
	return cmd, unit
}

// readBounded reads at most 64 KiB of a /proc file (whose size stat reports as 0); what
// is not a regular file (a FIFO in a made-up tree) is refused without waiting on it.
func readBounded(path string) ([]byte, error) {
	return safefile.ReadPrefix(path, 64<<10)
}

// UnitOfCgroup returns the systemd service or scope a /proc/PID/cgroup text names
// ("0::/system.slice/qwen.service" gives "qwen.service"); "" when there is none.
func UnitOfCgroup(text string) string {
	return portowner.UnitOf(portowner.CgroupPath([]byte(text)))
}
