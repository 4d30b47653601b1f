package node

import (
	"sync"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Lease is what a command holds of the node beyond one change: the state dir's lock when
// it holds it from start to end (the daemon, between its applies too: its applies and
// rungs take none then), and the mutex that makes the daemon's recipes apply and repair
// one at a time. The zero value holds nothing: each change takes the lock.
type Lease struct {
	Lock *engine.Lock
	Mu   *sync.Mutex
}

// Take takes the node of state dir dir for a change of what serves (an apply, a daemon's
// rung, a roll back): the daemon's in-process mutex, and the state dir's lock (through
// acquire; engine.AcquireLock when nil) unless h holds it already. release gives back
// what it took.
func (h *Lease) Take(dir string, acquire func(dir string) (*engine.Lock, error)) (release func(), err error) {
	if acquire == nil {
		acquire = engine.AcquireLock
	}
	if h.Mu != nil {
		h.Mu.Lock()
	}
	if h.Lock != nil {
		return h.unlock, nil
	}
	lock, err := acquire(dir)
	if err != nil {
		h.unlock()
		return nil, err
	}
	return func() {
		lock.Release()
		h.unlock()
	}, nil
}

func (h *Lease) unlock() {
	if h.Mu != nil {
		h.Mu.Unlock()
	}
}

// TakeForLife takes the lock of state dir dir (made first, as its checks want it; insecure
// accepts one that others can write) for a command's whole life, noted as the daemon's
// (engine.NoteDaemon), and holds it in h for the changes it makes meanwhile; release gives
// it back. acquire takes the lock (engine.AcquireLock when nil).
func (h *Lease) TakeForLife(dir string, insecure bool, acquire func(dir string) (*engine.Lock, error)) (release func(), err error) {
	if acquire == nil {
		acquire = engine.AcquireLock
	}
	if err := engine.EnsureStateDir(dir, insecure); err != nil {
		return nil, err
	}
	lock, err := acquire(dir)
	if err != nil {
		return nil, err
	}
	if err := lock.SetNote(engine.NoteDaemon); err != nil {
		lock.Release()
		return nil, err
	}
	h.Lock = lock
	return func() { h.Lock = nil; lock.Release() }, nil
}
