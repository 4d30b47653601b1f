package fetch

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Remaining returns the bytes still to download of files into dest, as Fetch counts them
// before its free-space check: each file that is not already there at its size, less what
// a resumable part of it holds. unknown counts the files whose size is not known (they add
// nothing). It reads only file sizes and writes nothing.
func Remaining(dest string, files []File) (need uint64, unknown int, err error) {
	for _, f := range files {
		p, err := safeJoin(dest, f.Path)
		if err != nil {
			return 0, 0, fmt.Errorf("fetch: %w", err)
		}
		part, _ := partPaths(dest, f.Path)
		j := &job{f: f, final: p, part: part}
		if f.Size < 0 {
			if _, err := os.Stat(p); err != nil {
				unknown++
			}
			continue
		}
		present, err := j.present()
		if err != nil {
			return 0, 0, err
		}
		if present {
			continue
		}
		left := f.Size
		if st, err := os.Stat(j.part); err == nil && st.Size() <= f.Size && f.SHA256 != "" {
			left -= st.Size()
		}
		need += uint64(left)
	}
	return need, unknown, nil
}

// PartPath returns where Fetch keeps the part of the file at rel (relative to dest) while
// it downloads it.
func PartPath(dest, rel string) string {
	part, _ := partPaths(dest, rel)
	return part
}

// FreeSpace returns the bytes free to an unprivileged user on the file system that holds
// dir, or its nearest existing parent when dir is not there yet, and the folder it checked.
func FreeSpace(dir string) (free uint64, checked string, err error) {
	checked = existingAncestor(dir)
	free, err = statfsFree(checked)
	return free, checked, err
}

// FileSystemID returns an id of the file system that holds dir, or its nearest existing
// parent as FreeSpace checks: the device number of that folder, the same for every folder
// on one file system, so that what several downloads need there can be added up.
func FileSystemID(dir string) (uint64, error) {
	var st unix.Stat_t
	checked := existingAncestor(dir)
	if err := unix.Stat(checked, &st); err != nil {
		return 0, fmt.Errorf("finding the file system of %s: %w", checked, err)
	}
	return uint64(st.Dev), nil
}
