package patch

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

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// lockName is the lock file's name inside stageDir. Every run that writes the tree holds
// it (flock) from before it reads what an earlier run left until its write is done, so
// that two runs with different state folders (the engine's run lock is per state folder)
// never stage, rename or recover over each other.
const lockName = "lock"

// treeLock is the held lock of one tree.
type treeLock struct {
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

// lockTree creates the stage folder of the tree at root (if needed) and takes its lock:
// it waits for another step of this run that writes the tree, and not at all for another
// process, whose hold is an error that wraps engine.ErrLocked and names that process's
// pid. The holder removes the lock file (and the folder, when it is empty) before it
// lets go, so a lock taken on a file that was removed meanwhile is taken again on the
// new one.
func lockTree(ctx context.Context, root string) (*treeLock, error) {
	key, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", root, err)
	}
	unlock, err := lockLocal(ctx, key)
	if err != nil {
		return nil, err
	}
	l, err := lockFile(root)
	if err != nil {
		unlock()
		return nil, err
	}
	l.unlock = unlock
	return l, nil
}

// lockFile takes the flock of the tree's lock file without waiting.
func lockFile(root string) (*treeLock, error) {
	stage := filepath.Join(root, stageDir)
	if fi, err := os.Lstat(stage); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder the patch step made; remove it: %w", stage, engine.ErrUsage)
	}
	path := filepath.Join(stage, lockName)
	for range 10 {
		if err := os.Mkdir(stage, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("creating %s: %w", stage, err)
		}
		f, err := safefile.OpenNoFollow(path, os.O_RDWR|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the folder went with a holder that let go
		}
		if err != nil {
			return nil, fmt.Errorf("opening the patch lock %s: %w", path, err)
		}
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("%s is not a regular file; remove it: %w", path, engine.ErrUsage)
		}
		// The holder's pid is written in place: through a second hard link it would
		// truncate the file of the other name.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			f.Close()
			return nil, fmt.Errorf("%s has %d hard links; sglprov writes it and never through a link: remove it: %w", path, st.Nlink, engine.ErrUsage)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			holder := lockHolder(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %s is writing the patched files of %s (it holds %s); wait for it to finish: two runs must not patch one tree at once",
					engine.ErrLocked, holder, root, path)
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
		return &treeLock{f: f, path: path, stage: stage}, nil
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

// release removes the lock file, lets the lock go and removes the stage folder when
// nothing else is in it.
func (l *treeLock) release() {
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

// clearStage removes what the stage folder holds besides the lock, and reports how many
// entries it removed.
func clearStage(stage string) (int, error) {
	entries, err := os.ReadDir(stage)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", stage, err)
	}
	n := 0
	for _, e := range entries {
		if e.Name() == lockName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(stage, e.Name())); err != nil {
			return n, fmt.Errorf("removing %s: %w", filepath.Join(stage, e.Name()), err)
		}
		n++
	}
	return n, nil
}
