package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// SystemUnitDir is where system units are installed, before --root is applied.
const SystemUnitDir = "/etc/systemd/system"

// WriteFileIfChanged writes content to path unless the file already holds exactly that:
// through a temporary file in the same folder, fsynced, renamed over path, and the folder
// fsynced, so that a crash leaves the old file or the new one, never a mix. It reports
// whether it wrote.
func WriteFileIfChanged(path string, content []byte, perm fs.FileMode) (bool, error) {
	old, err := os.ReadFile(path)
	if err == nil && bytes.Equal(old, content) {
		return false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := WriteFileAtomic(path, content, perm); err != nil {
		return false, err
	}
	return true, nil
}

// WriteFileAtomic writes content to path through a temporary file, fsync and rename, then
// fsyncs the folder.
func WriteFileAtomic(path string, content []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(content); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("setting the mode of %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmp, path, err)
	}
	ok = true
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

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
	if _, err := WriteFileIfChanged(LastKnownGoodPath(stateDir, unit), content, 0o644); err != nil {
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
