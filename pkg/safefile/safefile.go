// Package safefile reads the files sglprov trusts (recipes, patch series, patches, unit
// templates) and checks the folders it keeps state in, the way sshd's StrictModes checks
// a user's keys: only regular files, owned by root or the invoking user, that no one else
// can write, in folders no one else can write.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Errors a check wraps, so that callers can map them to an exit code.
var (
	// ErrNotRegular marks a FIFO, device, socket or folder where a regular file is read.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge marks a file over the size limit of what is read.
	ErrTooLarge = errors.New("file too large")
	// ErrUntrusted marks a file or folder that someone other than root or the invoking
	// user owns or can write.
	ErrUntrusted = errors.New("untrusted owner or mode")
	// ErrSymlink marks a symbolic link where sglprov keeps its own files.
	ErrSymlink = errors.New("symbolic link")
)

// ReadRegular reads the regular file at path (symbolic links followed), refusing anything
// else without blocking: a FIFO is opened non-blocking and refused, so that a FIFO given as
// a recipe never waits for a writer. A limit > 0 refuses a file of more bytes.
func ReadRegular(path string, limit int64) ([]byte, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpened(f, path, limit)
}

// ReadPrefix reads at most max bytes of the regular file at path (symbolic links
// followed), refusing anything else without blocking, as ReadRegular does; a longer file
// is cut at max bytes, not refused. It is for the kernel's files (/proc, sysfs), whose size
// stat does not tell: a FIFO planted in their place is refused, never waited on.
func ReadPrefix(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, max))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

// readOpened reads f, opened non-blocking from path, when it is a regular file of at most
// limit bytes (limit > 0); anything else is refused without reading it.
func readOpened(f *os.File, path string, limit int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	if limit > 0 && fi.Size() > limit {
		return nil, tooLarge(path, fi.Size(), limit)
	}
	var r io.Reader = f
	if limit > 0 {
		r = io.LimitReader(f, limit+1)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if limit > 0 && int64(len(data)) > limit {
		return nil, tooLarge(path, int64(len(data)), limit)
	}
	return data, nil
}

func notRegular(path string, m fs.FileMode) error {
	what := "a " + typeName(m)
	return fmt.Errorf("%s is %s, not a regular file: %w", path, what, ErrNotRegular)
}

func tooLarge(path string, size, limit int64) error {
	return fmt.Errorf("%s has %d bytes, more than the limit of %d: %w", path, size, limit, ErrTooLarge)
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "folder"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}

// Owners are the users whose files sglprov trusts: root and the invoking user.
type Owners struct {
	uids []uint32
}

// Invoker returns root, the process's real and effective users and, when it runs as root
// through sudo, the user who called sudo (SUDO_UID, read through getenv).
func Invoker(getenv func(string) string) Owners {
	o := Owners{uids: []uint32{0, uint32(os.Getuid()), uint32(os.Geteuid())}}
	if getenv != nil && os.Geteuid() == 0 {
		if n, err := strconv.ParseUint(getenv("SUDO_UID"), 10, 32); err == nil {
			o.uids = append(o.uids, uint32(n))
		}
	}
	return o
}

// Trusts reports whether uid is one of the owners.
func (o Owners) Trusts(uid uint32) bool { return slices.Contains(o.uids, uid) }

func owner(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 0
}

// Check refuses the file or folder at path (symbolic links resolved first, as sshd does)
// unless it and every folder above it are owned by one of the owners and writable by no
// group or other user. A group- or world-writable folder with the sticky bit (/tmp) is
// accepted, since there others cannot rename or remove an entry they do not own. Every
// symbolic link on the way (path itself, or a folder of it) must be owned by one of the
// owners and lie in a folder that passes the same check: whoever owns a link, or can
// replace it, chooses what it points to.
func (o Owners) Check(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if err := o.checkEntry(path, real, fi); err != nil {
		return err
	}
	if err := o.checkFolders(path, filepath.Dir(real)); err != nil {
		return err
	}
	return o.checkLinks(path, abs)
}

// checkLinks follows abs one element at a time, as the kernel does, and checks every
// symbolic link it meets: its owner, and the folders it lies in.
func (o Owners) checkLinks(path, abs string) error {
	cur := "/"
	parts := strings.Split(abs, "/")
	for links := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur holds no link: its parent is the real one
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return fmt.Errorf("%s: too many symbolic links on the way", path)
		}
		if !o.Trusts(owner(fi)) {
			return fmt.Errorf("%s: the symbolic link %s is owned by uid %d, not by root or this user; whoever owns it chooses what it points to: %w",
				path, next, owner(fi), ErrUntrusted)
		}
		if err := o.checkFolders(path, cur); err != nil {
			return err
		}
		target, err := os.Readlink(next)
		if err != nil {
			return err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	return nil
}

// checkFolders checks dir and every folder above it: owned by one of the owners, and
// writable by no group or other user unless sticky.
func (o Owners) checkFolders(path, dir string) error {
	for ; ; dir = filepath.Dir(dir) {
		di, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !o.Trusts(owner(di)) {
			return fmt.Errorf("%s: the folder %s is owned by uid %d, not by root or this user; anyone who can change it can run commands as this user: %w",
				path, dir, owner(di), ErrUntrusted)
		}
		if di.Mode().Perm()&0o022 != 0 && di.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%s: the folder %s is writable by group or others (mode %04o) and not sticky: anyone who can write it can replace what is inside; `chmod go-w %s`: %w",
				path, dir, di.Mode().Perm(), dir, ErrUntrusted)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

func (o Owners) checkEntry(path, real string, fi fs.FileInfo) error {
	if !o.Trusts(owner(fi)) {
		return fmt.Errorf("%s is owned by uid %d, not by root or this user: anyone who can change it can run commands as this user; `chown root %s`: %w",
			path, owner(fi), real, ErrUntrusted)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %04o): anyone who can change it can run commands as this user; `chmod go-w %s`: %w",
			path, fi.Mode().Perm(), real, ErrUntrusted)
	}
	return nil
}

// NoSymlinks refuses a folder that holds a symbolic link among its entries (names, when
// given, limits the check to those entries): sglprov writes its lock, state and reports
// there and must never write through a link.
func NoSymlinks(dir string, names ...string) error {
	if len(names) == 0 {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link; sglprov writes there and never through a link: remove it: %w", p, ErrSymlink)
		}
	}
	return nil
}

// OpenNoFollow opens path with flag and perm, refusing a symbolic link in its last
// element (O_NOFOLLOW).
func OpenNoFollow(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link; sglprov never opens its own files through a link: remove it: %w", path, ErrSymlink)
	}
	return f, err
}

// ReadNoFollow reads the regular file at path, refusing a symbolic link in its last
// element, and anything not a regular file without waiting on it (a FIFO).
func ReadNoFollow(path string) ([]byte, error) {
	f, err := OpenNoFollow(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpened(f, path, 0)
}
