package generation

import (
	"io/fs"
	"syscall"
)

// inode returns the device and inode of a file, to count a file with several links once.
func inode(fi fs.FileInfo) ([2]uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink < 2 {
		return [2]uint64{}, false
	}
	return [2]uint64{uint64(st.Dev), st.Ino}, true
}
