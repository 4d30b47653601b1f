// Part files: where a file's part and resume record live under dest, how a complete part
// is checked and renamed into place, and how leftover parts are removed.

package fetch

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/atomicfile"
)

// safeJoin joins a relative, clean path to dest, refusing absolute paths and "..".
func safeJoin(dest, rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.Contains(rel, "\\") {
		return "", fmt.Errorf("unsafe file path %q", rel)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." || part == "" || part == "." {
			return "", fmt.Errorf("unsafe file path %q", rel)
		}
	}
	if first, _, _ := strings.Cut(rel, "/"); first == WorkDir {
		return "", fmt.Errorf("file path %q is inside %s/, the folder that holds the part files; no listed file may be there", rel, WorkDir)
	}
	return filepath.Join(dest, filepath.FromSlash(rel)), nil
}

// partPaths returns the part file and the resume record of the file at rel (relative to
// dest, already checked by safeJoin). They live under dest/.sglprov/parts, where no listed
// file can be (safeJoin refuses that folder), and their names end in ".part" and
// ".part.json" so that the part of one file is never the record of another.
func partPaths(dest, rel string) (part, side string) {
	base := filepath.Join(dest, WorkDir, partsDir, filepath.FromSlash(rel))
	return base + partSuffix, base + sideSuffix
}

// finalize checks size and digest, fsyncs and renames the part into place.
func (j *job) finalize(pf *os.File, s *stream) error {
	got := s.written
	if j.f.Size >= 0 && got != j.f.Size {
		return &MismatchError{Path: j.f.Path, What: "size", Expected: fmt.Sprint(j.f.Size), Actual: fmt.Sprint(got)}
	}
	if s.size >= 0 && got != s.size {
		return &MismatchError{Path: j.f.Path, What: "size", Expected: fmt.Sprint(s.size), Actual: fmt.Sprint(got)}
	}
	sum := hex.EncodeToString(s.h.sha256.Sum(nil))
	if j.f.SHA256 != "" {
		if sum != j.f.SHA256 {
			return &MismatchError{Path: j.f.Path, What: "sha256", Expected: j.f.SHA256, Actual: sum}
		}
	} else {
		var gitSum string
		if s.h.git != nil {
			gitSum = hex.EncodeToString(s.h.git.Sum(nil))
		} else {
			// The size was unknown when the download began: hash the small file again.
			g, err := gitBlobSHA1(j.part)
			if err != nil {
				return err
			}
			gitSum = g
		}
		if gitSum != j.f.GitSHA1 {
			return &MismatchError{Path: j.f.Path, What: "git-sha1", Expected: j.f.GitSHA1, Actual: gitSum}
		}
	}
	if err := pf.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", j.part, err)
	}
	if err := os.MkdirAll(filepath.Dir(j.final), 0o755); err != nil {
		return fmt.Errorf("creating folder for %s: %w", j.f.Path, err)
	}
	if err := os.Rename(j.part, j.final); err != nil {
		return fmt.Errorf("renaming %s: %w", j.part, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(j.final)); err != nil {
		return err
	}
	// What was renamed must be the file whose bytes were hashed, not another one put at
	// the part's name meanwhile.
	if same, err := sameFile(pf, j.final); err != nil {
		return err
	} else if !same {
		_ = os.Remove(j.final)
		return fmt.Errorf("%s was replaced by another file while it was downloaded; removed it", j.final)
	}
	_ = os.Remove(j.side)
	_ = os.Remove(j.side + ".tmp")
	j.result.Size = got
	j.result.SHA256 = sum
	return nil
}

// sameFile reports whether the open file f is the file at path.
func sameFile(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", f.Name(), err)
	}
	b, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", path, err)
	}
	return os.SameFile(a, b), nil
}

func removeParts(dest string) ([]string, error) {
	root := filepath.Join(dest, WorkDir, partsDir)
	seen := map[string]bool{}
	var dirs []string
	// The parts a running download holds (another run into the same dest) stay, with their
	// resume records.
	held := map[string]bool{}
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, partSuffix) && partLocked(p) {
			held[p] = true
		}
		return nil
	})
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) && p == root {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, suf := range []string{sideSuffix + ".tmp", sideSuffix, partSuffix} {
			if name, ok := strings.CutSuffix(rel, suf); ok {
				rel = name
				break
			}
		}
		if held[filepath.Join(root, filepath.FromSlash(rel))+partSuffix] {
			return nil
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("removing %s: %w", p, err)
		}
		seen[rel] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("removing part files under %s: %w", root, err)
	}
	// Deepest first; a folder that is not empty (something else put there) stays.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
	_ = os.Remove(filepath.Join(dest, WorkDir))
	removed := make([]string, 0, len(seen))
	for rel := range seen {
		removed = append(removed, rel)
	}
	sort.Strings(removed)
	return removed, nil
}

// errPartGone says that the part file was removed (or replaced) between its opening and
// its lock: the attempt opens it again.
var errPartGone = errors.New("the part file was removed while it was opened")

// holdPart takes a shared flock on the open part file pf for as long as it stays open, so
// that FreePart (gc, remove) leaves a part a download writes, and checks that pf is still
// the file at path (FreePart may have removed it just before the lock was taken).
func holdPart(pf *os.File, path string) error {
	for {
		err := syscall.Flock(int(pf.Fd()), syscall.LOCK_SH)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) { // a wait a signal interrupts goes on
			return fmt.Errorf("locking %s: %w", path, err)
		}
	}
	a, err := pf.Stat()
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	b, err := os.Lstat(path)
	if err != nil || !os.SameFile(a, b) {
		return errPartGone
	}
	return nil
}

// partLocked reports whether a running download holds the part file at p (its flock).
func partLocked(p string) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// FreePart removes the part file at p (a host path ending in ".part") and its resume
// records, unless a running download holds it (inUse: nothing is removed). It never
// follows a link at p. It returns the bytes removed; with dryRun it removes nothing and
// returns what it would.
func FreePart(p string, dryRun bool) (freed int64, inUse bool, err error) {
	if !strings.HasSuffix(p, partSuffix) {
		return 0, false, fmt.Errorf("%s is not a part file", p)
	}
	files := []string{p, p + ".json", p + ".json.tmp"}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err == nil {
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return 0, true, nil
			}
			return 0, false, fmt.Errorf("locking %s: %w", p, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, false, fmt.Errorf("opening %s: %w", p, err)
	}
	for _, x := range files {
		fi, err := os.Lstat(x)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if !dryRun {
			if err := os.Remove(x); err != nil && !errors.Is(err, os.ErrNotExist) {
				return freed, false, fmt.Errorf("removing %s: %w", x, err)
			}
		}
		freed += fi.Size()
	}
	return freed, false, nil
}

// FreePartAt is FreePart for the part file name in the open folder dirfd: the part file and
// its resume records are opened, checked and removed relative to that handle (never by
// path, never through a link), so a link swapped in at a folder on the way after the
// caller checked it is never reached. display names the part file in errors.
func FreePartAt(dirfd int, name, display string, dryRun bool) (freed int64, inUse bool, err error) {
	if !strings.HasSuffix(name, partSuffix) || strings.Contains(name, "/") {
		return 0, false, fmt.Errorf("%s is not a part file", display)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		defer unix.Close(fd)
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return 0, true, nil
			}
			return 0, false, fmt.Errorf("locking %s: %w", display, err)
		}
	} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ELOOP) {
		return 0, false, fmt.Errorf("opening %s: %w", display, err)
	}
	for _, x := range []string{name, name + ".json", name + ".json.tmp"} {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, x, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if !dryRun {
			if err := unix.Unlinkat(dirfd, x, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return freed, false, fmt.Errorf("removing %s: %w", filepath.Join(filepath.Dir(display), x), err)
			}
		}
		freed += st.Size
	}
	return freed, false, nil
}
