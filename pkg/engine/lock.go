package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// Lock is the run lock of a state directory (flock on DIR/lock), held for a whole run.
type Lock struct {
	f *os.File
}

// AcquireLock takes the lock of the state directory without waiting. When another run
// holds it, the error wraps ErrLocked and names that run's pid.
func AcquireLock(dir string) (*Lock, error) {
	path := filepath.Join(dir, "lock")
	// Never through a link: a `lock` symlink must not truncate its target.
	f, err := safefile.OpenNoFollow(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, safefile.ErrSymlink) {
		return nil, fmt.Errorf("%w: opening lock: %v", ErrUsage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file; remove it", ErrUsage, path)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if b, rerr := safefile.ReadNoFollow(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					holder = fmt.Sprintf("pid %d", pid)
				}
			}
			return nil, fmt.Errorf("%w: %s holds %s; wait for it to finish", ErrLocked, holder, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing drops the flock
	l.f = nil
	return err
}
