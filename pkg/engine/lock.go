package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// Lock is the run lock of a state directory (flock on DIR/lock), held for a whole run.
type Lock struct {
	f      *os.File
	shared bool
}

// AcquireLock takes the lock of the state directory without waiting. When another run
// holds it, the error wraps exitcode.ErrLocked and names that run's pid.
func AcquireLock(dir string) (*Lock, error) {
	path := filepath.Join(dir, "lock")
	// Never through a link: a `lock` symlink must not truncate its target.
	f, err := safefile.OpenNoFollow(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, safefile.ErrSymlink) {
		return nil, fmt.Errorf("%w: opening lock: %v", exitcode.ErrUsage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening lock: %w", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file; remove it", exitcode.ErrUsage, path)
	}
	// The lock is written in place (the holder's pid): a hard link would have it truncate
	// the file of the other name.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		f.Close()
		return nil, fmt.Errorf("%w: %s has %d hard links; sglprov writes it and never through a link: remove it", exitcode.ErrUsage, path, st.Nlink)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := holderOf(path)
			if holder == "another process" {
				holder = "another process (a plan, or a run starting)"
			}
			if strings.HasPrefix(holder, "the sglprov daemon") {
				return nil, fmt.Errorf("%w: %s holds %s: it watches this node and applies the recipe itself; send it SIGHUP to re-read the recipe, or stop it first", exitcode.ErrLocked, holder, path)
			}
			return nil, fmt.Errorf("%w: %s holds %s; wait for it to finish", exitcode.ErrLocked, holder, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// AcquireSharedLock takes the lock of the state directory in shared mode without waiting,
// for a command that reads the state (plan): several readers may hold it at once, an
// apply may not start meanwhile. When an apply holds it, the error wraps exitcode.ErrLocked and
// LockHolder names the apply's pid. A state directory without a lock file (no apply ever
// ran there) or one this user cannot read needs no lock: (nil, nil).
func AcquireSharedLock(dir string) (*Lock, error) {
	path := filepath.Join(dir, "lock")
	// Non-blocking: a FIFO there is refused, not waited on.
	f, err := safefile.OpenNoFollow(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file; remove it", exitcode.ErrUsage, path)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: an apply is running (%s)", exitcode.ErrLocked, holderOf(path))
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return &Lock{f: f, shared: true}, nil
}

// LockHolder returns the pid written in the state directory's lock by the apply holding
// it (0 when none is written).
func LockHolder(dir string) int {
	pid, _ := lockContent(dir)
	return pid
}

// LockNote returns what the holder of the state directory's lock says it is doing, beside
// its pid: NoteDaemon for a daemon between its applies, NoteDaemonApplying while it
// applies, "" for a one-shot run.
func LockNote(dir string) string {
	_, note := lockContent(dir)
	return note
}

// Notes a lock holder writes after its pid.
const (
	// NoteDaemon: the daemon holds the node's lock between its applies (it watches the
	// node; nothing is being written).
	NoteDaemon = "daemon"
	// NoteDaemonApplying: the daemon is applying the recipe.
	NoteDaemonApplying = "daemon applying"
)

func lockContent(dir string) (int, string) {
	b, err := safefile.ReadNoFollow(filepath.Join(dir, "lock"))
	if err != nil {
		return 0, ""
	}
	first, rest, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	pid, _ := strconv.Atoi(first)
	return pid, strings.TrimSpace(rest)
}

func holderOf(path string) string {
	pid, note := lockContent(filepath.Dir(path))
	switch {
	case pid > 0 && strings.HasPrefix(note, NoteDaemon):
		return fmt.Sprintf("the sglprov daemon, pid %d,", pid)
	case pid > 0:
		return fmt.Sprintf("pid %d", pid)
	}
	return "another process"
}

// SetNote rewrites the lock's content as the holder's pid and note (see LockNote).
func (l *Lock) SetNote(note string) error {
	if l == nil || l.f == nil || l.shared {
		return nil
	}
	line := strconv.Itoa(os.Getpid())
	if note != "" {
		line += " " + note
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("writing the lock: %w", err)
	}
	if _, err := l.f.WriteAt([]byte(line+"\n"), 0); err != nil {
		return fmt.Errorf("writing the lock: %w", err)
	}
	return nil
}

// Release gives the lock up.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	if !l.shared {
		_ = l.f.Truncate(0)
	}
	err := l.f.Close() // closing drops the flock
	l.f = nil
	return err
}
