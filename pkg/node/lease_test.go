package node_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/node"
)

// TestLease: a change of what serves takes the state dir's lock, which a second holder is
// refused (exit 3) until the first lets go; under the daemon, which holds the lock from
// start to end, it takes none.
func TestLease(t *testing.T) {
	state := t.TempDir()
	a, b := &node.Lease{}, &node.Lease{}
	release, err := a.Take(state, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Take(state, nil); !errors.Is(err, exitcode.ErrLocked) {
		t.Errorf("second holder: %v, want ErrLocked", err)
	}
	release()
	again, err := b.Take(state, nil)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()

	lock, err := engine.AcquireLock(state)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	var took atomic.Int32
	d := &node.Lease{Lock: lock}
	rel, err := d.Take(state, func(dir string) (*engine.Lock, error) {
		took.Add(1)
		return engine.AcquireLock(dir)
	})
	if err != nil {
		t.Fatalf("the daemon's Take: %v", err)
	}
	rel()
	if took.Load() != 0 {
		t.Errorf("the daemon's Take took the lock %d times, want none", took.Load())
	}
}

// TestTakeForLife: a command that takes the node for its life (the daemon) holds the lock,
// noted as the daemon's, and a change it makes meanwhile takes no lock of its own.
func TestTakeForLife(t *testing.T) {
	state := t.TempDir()
	var h node.Lease
	release, err := h.TakeForLife(state, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Lock == nil || engine.LockNote(state) != engine.NoteDaemon {
		t.Errorf("kept lock %v, note %q; want the lock, noted %q", h.Lock, engine.LockNote(state), engine.NoteDaemon)
	}
	if _, err := engine.AcquireLock(state); !errors.Is(err, exitcode.ErrLocked) {
		t.Errorf("another apply while kept: %v, want ErrLocked", err)
	}
	rel, err := h.Take(state, nil)
	if err != nil {
		t.Fatalf("a change under the kept lock: %v", err)
	}
	rel()
	release()
	if h.Lock != nil {
		t.Error("the lock is still kept after release")
	}
	l, err := engine.AcquireLock(state)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	l.Release()
}
