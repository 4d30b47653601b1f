package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// SystemUnitDir is where system units are installed, before --root is applied.
const SystemUnitDir = "/etc/systemd/system"

// Verify checks a rendered unit with `systemd-analyze verify`: the unit is written under
// its own name to a temporary folder and checked there (it checks, among others, that the
// executable exists). It reports false, and no error, when systemd-analyze is not
// installed. A unit that fails the check is an error with systemd-analyze's output.
func Verify(ctx context.Context, unit string, content []byte) (bool, error) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		return false, nil
	}
	dir, err := os.MkdirTemp("", "sglprov-verify-")
	if err != nil {
		return false, fmt.Errorf("verifying unit %q: %w", unit, err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, unit)
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return false, fmt.Errorf("verifying unit %q: %w", unit, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "verify", "--man=no", path).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(strings.ReplaceAll(string(out), path, unit))
		if msg == "" {
			msg = err.Error()
		}
		return true, fmt.Errorf("systemd-analyze verify %s: %s", unit, msg)
	}
	return true, nil
}

// LastKnownGoodPath is where the last unit that passed the gate is kept.
func LastKnownGoodPath(stateDir, unit string) string {
	return filepath.Join(stateDir, "units", unit+".last-known-good")
}

// SaveLastKnownGood keeps content as the last-known-good unit.
func SaveLastKnownGood(stateDir, unit string, content []byte) error {
	if _, err := atomicfile.WriteIfChanged(LastKnownGoodPath(stateDir, unit), content, 0o644); err != nil {
		return fmt.Errorf("keeping last-known-good unit %q: %w", unit, err)
	}
	return nil
}

// LoadLastKnownGood returns the last-known-good unit; it reports false when there is none.
func LoadLastKnownGood(stateDir, unit string) ([]byte, bool, error) {
	b, err := os.ReadFile(LastKnownGoodPath(stateDir, unit))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading last-known-good unit %q: %w", unit, err)
	}
	return b, true, nil
}

// tailLines returns the last n lines of b.
func tailLines(b []byte, n int) string {
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
