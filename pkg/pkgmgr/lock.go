package pkgmgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Holder describes who holds a lock: a process id (0 when the holder is in another pid
// namespace or holds an open-file-description lock) and its command name.
type Holder struct {
	PID  int
	Comm string
}

// String is "pid 1234 (unattended-upgr)", or "another process" when the pid is unknown.
func (h Holder) String() string {
	if h.PID <= 0 {
		return "another process"
	}
	if h.Comm == "" {
		return "pid " + strconv.Itoa(h.PID)
	}
	return fmt.Sprintf("pid %d (%s)", h.PID, h.Comm)
}

// LockHolder reports whether the file at path is write-locked the way dpkg and apt lock
// their files (POSIX record locks, which also conflict with open-file-description locks),
// and by whom. It takes no lock itself. A file that does not exist is not held.
func LockHolder(path string) (Holder, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrPermission) {
		f, err = os.Open(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("opening lock %s: %w", path, err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return Holder{}, false, fmt.Errorf("testing lock %s: %w", path, err)
	}
	if lk.Type == unix.F_UNLCK {
		return Holder{}, false, nil
	}
	h := Holder{PID: int(lk.Pid)}
	if h.PID > 0 {
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(h.PID), "comm")); err == nil {
			h.Comm = strings.TrimSpace(string(b))
		}
	}
	return h, true, nil
}

// LockWait waits for locks to be free.
type LockWait struct {
	// Timeout is how long to wait in all (0: do not wait).
	Timeout time.Duration
	// Limit is the lock_timeout the error names, when the wait is what is left of it
	// (Timeout when zero).
	Limit time.Duration
	// Poll is how often the lock is tested (default 500 ms); Every how often a waiting
	// line is logged (default 10 s).
	Poll, Every time.Duration
	// Logf receives the progress lines.
	Logf func(format string, args ...any)
}

// Wait returns once none of paths is locked, logging who holds one at first and then every
// w.Every; it fails when the wait would pass w.Timeout (naming the lock and its holder) or
// ctx ends. It returns how long it waited.
func (w LockWait) Wait(ctx context.Context, paths ...string) (time.Duration, error) {
	poll, every := w.Poll, w.Every
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	logf := w.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	start := time.Now()
	var lastLog time.Time
	for {
		held := ""
		var holder Holder
		for _, p := range paths {
			h, ok, err := LockHolder(p)
			if err != nil {
				return time.Since(start), err
			}
			if ok {
				held, holder = p, h
				break
			}
		}
		waited := time.Since(start)
		if held == "" {
			if waited >= poll {
				logf("lock %s is free after %s; going on", strings.Join(paths, ", "), waited.Round(100*time.Millisecond))
			}
			return waited, nil
		}
		if waited >= w.Timeout {
			limit := w.Limit
			if limit <= 0 {
				limit = w.Timeout
			}
			return waited, fmt.Errorf("waiting for %s: still held by %s after %s (lock_timeout %s); it is usually cloud-init or unattended-upgrades on a first boot: wait for it, or raise lock_timeout",
				held, holder, roundWait(waited), roundWait(limit))
		}
		if lastLog.IsZero() || time.Since(lastLog) >= every {
			logf("waiting for %s, held by %s (waited %s of at most %s)", held, holder, waited.Round(time.Second), w.Timeout.Round(time.Second))
			lastLog = time.Now()
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Since(start), fmt.Errorf("waiting for %s: %w", held, ctx.Err())
		case <-t.C:
		}
	}
}

// roundWait rounds d to the second, or to 100 ms under a second.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
