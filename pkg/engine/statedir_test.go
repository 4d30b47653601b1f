package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// A `lock` symlink in the state dir must not truncate (or lock) its target.
func TestLockRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "lock")); err != nil {
		t.Fatal(err)
	}
	l, err := engine.AcquireLock(dir)
	if err == nil {
		l.Release()
	}
	if err == nil || exitcode.Of(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("AcquireLock with a lock symlink = %v, want exit 2 naming the link", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me\n" {
		t.Errorf("the link's target now holds %q", b)
	}
}

func TestStateDirRefusesSymlinkEntries(t *testing.T) {
	for _, name := range []string{"state.json", "runs", "lock", "other"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Symlink(t.TempDir(), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			err := engine.EnsureStateDir(dir, false)
			if exitcode.Of(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("EnsureStateDir with a %s symlink = %v, want exit 2", name, err)
			}
			// --insecure-permissions does not open this door.
			if err := engine.EnsureStateDir(dir, true); err == nil {
				t.Errorf("EnsureStateDir(insecure) with a %s symlink succeeded", name)
			}
		})
	}
	dir := t.TempDir()
	if err := os.Symlink("/nonexistent", engine.StatePath(dir)); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.LoadState(dir); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("LoadState through a symlink = %v, want refused", err)
	}
}

func TestStateDirOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "state")
	if err := engine.EnsureStateDir(dir, false); err != nil {
		t.Fatalf("a new state dir: %v", err)
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	err := engine.EnsureStateDir(dir, false)
	if exitcode.Of(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), "owned by uid 4242") {
		t.Errorf("a state dir of another user = %v, want exit 2 naming the owner", err)
	}
	if err := engine.EnsureStateDir(dir, true); err != nil {
		t.Errorf("--insecure-permissions: %v", err)
	}
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o777); err != nil {
		t.Fatal(err)
	}
	err = engine.EnsureStateDir(dir, false)
	if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "not sticky") {
		t.Errorf("a state dir in a world-writable folder = %v, want refused", err)
	}
}

// A state dir given as a link that another user made in a sticky folder (/tmp/st pointing
// at a folder root owns) is refused before sglprov sets that folder's mode or writes in it.
func TestStateDirRefusesAnotherUsersLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	parent := t.TempDir()
	tmp := filepath.Join(parent, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(parent, "etc")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "st")
	if err := os.Symlink(victim, dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	err := engine.EnsureStateDir(dir, false)
	if exitcode.Of(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), "symbolic link "+dir+" is owned by uid 4242") {
		t.Errorf("a state dir through another user's link = %v, want exit 2 naming the link", err)
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the link's target: %v, %v; want its mode 0755 kept", fi.Mode(), err)
	}
}

// A FIFO as state.json is refused at once as bad input: status, plan and apply waited
// for a writer, deaf to SIGTERM.
func TestLoadStateRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(engine.StatePath(dir), 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan error, 1)
	go func() { _, err := engine.LoadState(dir); done <- err }()
	select {
	case err := <-done:
		if exitcode.Of(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), "is a FIFO, not a regular file") {
			t.Fatalf("LoadState = %v, want exit 2 naming the FIFO", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LoadState waited on a FIFO")
	}
}

// A `lock` that is a hard link (a state dir the invoking user owns, on a host that lets
// users link files they do not own) must not truncate the other name's file either.
func TestLockRefusesHardLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, filepath.Join(dir, "lock")); err != nil {
		t.Skip("link:", err)
	}
	l, err := engine.AcquireLock(dir)
	if err == nil {
		l.Release()
	}
	if exitcode.Of(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), "2 hard links") {
		t.Errorf("AcquireLock with a hard-linked lock = %v, want exit 2 naming the links", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me\n" {
		t.Errorf("the other name's file now holds %q", b)
	}
}

// A FIFO as the lock is refused by plan's shared lock at once, as apply refuses it: the
// read-only open waited for a writer.
func TestSharedLockRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "lock"), 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := engine.AcquireSharedLock(dir)
		l.Release()
		done <- err
	}()
	select {
	case err := <-done:
		if exitcode.Of(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), "is not a regular file") {
			t.Fatalf("AcquireSharedLock = %v, want exit 2 naming the lock", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AcquireSharedLock waited on a FIFO")
	}
}
