// Package treelock locks a folder tree that sglprov writes (a patched source tree, a
// recipe's generations folder) against another sglprov run that would write it at the same
// time: a flock on a lock file in a folder of the tree, plus a wait for the other steps of
// this process that write the same tree. Another process's hold is an error at once that
// wraps exitcode.ErrLocked and names that process's pid.
package treelock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// LockName is the lock file's name inside the tree's lock folder. Every run that writes
// the tree holds it (flock) from before it reads what an earlier run left until its write is
// done, so that two runs with different state folders (the engine's run lock is per state
// folder) never write over each other.
const LockName = "lock"

// Lock is the held lock of one tree.
type Lock struct {
	f      *os.File
	path   string
	stage  string
	unlock func()
}

// local serialises the patch steps of this process that write one tree (the engine runs
// independent steps at once): flock locks are per open file, so two steps of one run
// would otherwise refuse each other.
var local = struct {
	sync.Mutex
	held map[string]chan struct{}
}{held: map[string]chan struct{}{}}

// lockLocal waits, until ctx ends, for the other steps of this process that write the
// tree known as key, then holds it until the returned function is called.
func lockLocal(ctx context.Context, key string) (func(), error) {
	for {
		local.Lock()
		busy, ok := local.held[key]
		if !ok {
			done := make(chan struct{})
			local.held[key] = done
			local.Unlock()
			return func() {
				local.Lock()
				delete(local.held, key)
				local.Unlock()
				close(done)
			}, nil
		}
		local.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for another step writing %s: %w", key, context.Cause(ctx))
		}
	}
}

// Acquire creates the folder stageDir of the tree at root (if needed) and takes the lock in
// it: it waits for another step of this process that writes the tree, and not at all for
// another process, whose hold is an error that wraps exitcode.ErrLocked, names that
// process's pid and says it is doing what doing says ("writing the patched files of").
// The holder removes the lock file (and the folder, when it is empty) before it lets go, so
// a lock taken on a file that was removed meanwhile is taken again on the new one.
func Acquire(ctx context.Context, root, stageDir, doing string) (*Lock, error) {
	key, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", root, err)
	}
	unlock, err := lockLocal(ctx, key)
	if err != nil {
		return nil, err
	}
	l, err := lockFile(root, stageDir, doing)
	if err != nil {
		unlock()
		return nil, err
	}
	l.unlock = unlock
	return l, nil
}

// lockFile takes the flock of the tree's lock file without waiting.
func lockFile(root, stageDir, doing string) (*Lock, error) {
	stage := filepath.Join(root, stageDir)
	if fi, err := os.Lstat(stage); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder sglprov made; remove it: %w", stage, exitcode.ErrUsage)
	}
	path := filepath.Join(stage, LockName)
	for range 10 {
		if err := os.Mkdir(stage, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("creating %s: %w", stage, err)
		}
		f, err := safefile.OpenNoFollow(path, os.O_RDWR|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the folder went with a holder that let go
		}
		if err != nil {
			return nil, fmt.Errorf("opening the lock %s: %w", path, err)
		}
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("%s is not a regular file; remove it: %w", path, exitcode.ErrUsage)
		}
		// The holder's pid is written in place: through a second hard link it would
		// truncate the file of the other name.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			f.Close()
			return nil, fmt.Errorf("%s has %d hard links; sglprov writes it and never through a link: remove it: %w", path, st.Nlink, exitcode.ErrUsage)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			holder := lockHolder(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %s is %s %s (it holds %s); wait for it to finish: two runs must not write one tree at once",
					exitcode.ErrLocked, holder, doing, root, path)
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		// Locked: still the file at path? (A holder removes it before letting go.)
		held, err1 := f.Stat()
		now, err2 := os.Lstat(path)
		if err1 != nil || err2 != nil || !os.SameFile(held, now) {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &Lock{f: f, path: path, stage: stage}, nil
	}
	return nil, fmt.Errorf("locking %s: the lock file keeps being replaced", path)
}

// lockHolder names the process whose pid the lock file f holds.
func lockHolder(f *os.File) string {
	b, _ := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, 64), 64))
	if pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(b), "pid "))); err == nil && pid > 0 {
		return fmt.Sprintf("another sglprov (pid %d)", pid)
	}
	return "another sglprov (a run starting)"
}

// Release removes the lock file, lets the lock go and removes the lock's folder when
// nothing else is in it.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = os.Remove(l.path)
	_ = l.f.Close()
	l.f = nil
	_ = os.Remove(l.stage) // fails, harmlessly, when another run made a new lock there
	if l.unlock != nil {
		l.unlock()
	}
}
