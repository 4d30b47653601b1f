package ownership

import (
	"errors"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// unlinkUnder removes rel ('/'-separated, clean, inside) below the open folder dirfd,
// opening each folder on the way without following a link: a folder on the way that is a
// link, or is gone, leaves nothing to remove there (-1, nil). With dir it removes an empty
// folder; without, a file or a link, never a folder. It returns the bytes of the regular
// file removed (0 for a link or a folder, or a file whose other name seen already counted;
// -1 when nothing was there).
func unlinkUnder(dirfd int, rel string, dir bool, seen map[[2]uint64]bool) (int64, error) {
	parts := strings.Split(rel, "/")
	fd := dirfd
	for _, c := range parts[:len(parts)-1] {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != dirfd {
			unix.Close(fd)
		}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, nil
		}
		if err != nil {
			return 0, err
		}
		fd = next
	}
	if fd != dirfd {
		defer unix.Close(fd)
	}
	name := parts[len(parts)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, nil
		}
		return 0, err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if dir {
		if !isDir {
			return -1, nil
		}
		return 0, unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
	}
	if isDir {
		// A folder where sglprov wrote a file is not what it wrote.
		return -1, nil
	}
	var n int64
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		id := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if !seen[id] {
			seen[id] = true
			n = st.Size
		}
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, nil
		}
		return 0, err
	}
	return n, nil
}

// OpenFolder opens the folder at p without following a link in its last element and
// returns its handle when it is the folder dev and ino identify (a record's): ok is false
// when nothing is there, or a link or another folder is in its place. The caller closes fd.
func OpenFolder(p string, dev, ino uint64) (fd int, ok bool, err error) {
	fd, err = unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, false, nil
	}
	if err != nil {
		return -1, false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, false, err
	}
	if uint64(st.Dev) != dev || st.Ino != ino || ino == 0 {
		unix.Close(fd)
		return -1, false, nil
	}
	return fd, true, nil
}

// OpenUnder opens the folder rel ('/'-separated, clean, inside; "." is dirfd itself, opened
// again) below the open folder dirfd, each step without following a link: ok is false when
// a folder on the way is gone, a link or not a folder. The caller closes fd.
func OpenUnder(dirfd int, rel string) (fd int, ok bool, err error) {
	fd, err = unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, err
	}
	if rel == "." {
		return fd, true, nil
	}
	for _, c := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		unix.Close(fd)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, false, nil
		}
		if err != nil {
			return -1, false, err
		}
		fd = next
	}
	return fd, true, nil
}

// RemoveEmptyUnder removes the empty folder rel below the open folder dirfd (through its
// parent's handle, never through a link); it reports whether it did.
func RemoveEmptyUnder(dirfd int, rel string) bool {
	parent, ok, err := OpenUnder(dirfd, path.Dir(rel))
	if err != nil || !ok {
		return false
	}
	defer unix.Close(parent)
	return unix.Unlinkat(parent, path.Base(rel), unix.AT_REMOVEDIR) == nil
}
