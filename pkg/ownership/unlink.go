package ownership

import (
	"errors"
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
