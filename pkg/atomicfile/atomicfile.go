// Package atomicfile writes files so that a crash at any moment leaves either the old
// content or the new one, never a mix: a temporary file in the same folder, fsynced,
// renamed over the target, and the folder fsynced.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes data to path atomically with mode perm, creating the folder if needed.
func Write(path string, data []byte, perm fs.FileMode) error {
	st, err := Stage(path, data, perm)
	if err != nil {
		return err
	}
	return st.Commit()
}

// Staged is a file written and fsynced under a temporary name beside its target, not yet
// in place: several files can be staged first and committed together, so that a failure
// while writing any of them leaves every target as it was.
type Staged struct {
	path, tmp string
}

// Stage writes data to a temporary file beside path (creating the folder if needed) and
// fsyncs it.
func Stage(path string, data []byte, perm fs.FileMode) (*Staged, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(doing string, err error) (*Staged, error) {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("%s %s: %w", doing, tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail("writing", err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail("setting the mode of", err)
	}
	if err := f.Sync(); err != nil {
		return fail("syncing", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("closing %s: %w", tmp, err)
	}
	return &Staged{path: path, tmp: tmp}, nil
}

// Commit renames the staged file over its target and fsyncs the folder.
func (s *Staged) Commit() error {
	if err := os.Rename(s.tmp, s.path); err != nil {
		os.Remove(s.tmp)
		return fmt.Errorf("renaming %s to %s: %w", s.tmp, s.path, err)
	}
	return SyncDir(filepath.Dir(s.path))
}

// Abort removes the staged file; the target is untouched.
func (s *Staged) Abort() {
	os.Remove(s.tmp)
}

// WriteIfChanged writes data to path atomically unless the file already holds exactly
// that; it reports whether it wrote.
func WriteIfChanged(path string, data []byte, perm fs.FileMode) (bool, error) {
	old, err := os.ReadFile(path)
	if err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := Write(path, data, perm); err != nil {
		return false, err
	}
	return true, nil
}

// SyncDir fsyncs a folder, so that a rename or a new entry in it is durable.
func SyncDir(dir string) error {
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
