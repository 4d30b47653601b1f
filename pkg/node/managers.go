package node

import (
	"context"
	"errors"
	"sync"

	"github.com/sglprov/sglprov/pkg/service"
)

// Managers keeps the exec managers that a long-lived command's engines make (the
// daemon's: every apply, rung and roll back builds an engine of its own), one per set of
// service.Options, for the command's whole life. Under the exec manager the server is the
// child of the manager that started it: an engine that closes must not stop it, and the
// next engine must see it running, so that an apply whose unit is unchanged restarts
// nothing and a switch compares its candidate with what serves before anything stops.
// Other managers (systemd, offline) are made afresh at each use, as without Managers.
// Close stops what the kept managers run.
type Managers struct {
	// New makes a manager (service.New when nil).
	New func(ctx context.Context, opts service.Options) (service.Manager, error)

	mu     sync.Mutex
	kept   map[service.Options]*keptExec
	closed bool
}

// Manager returns the manager opts select: for the exec manager the one kept for opts
// (made on first use), whose Close leaves its servers running; others as New makes them.
func (m *Managers) Manager(ctx context.Context, opts service.Options) (service.Manager, error) {
	newFn := m.New
	if newFn == nil {
		newFn = service.New
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.kept[opts]; ok {
		return k, nil
	}
	mgr, err := newFn(ctx, opts)
	if err != nil || mgr.Kind() != service.KindExec || m.closed {
		return mgr, err
	}
	if m.kept == nil {
		m.kept = map[service.Options]*keptExec{}
	}
	k := &keptExec{Manager: mgr}
	m.kept[opts] = k
	return k, nil
}

// Close stops every service the kept managers started; a later Manager call makes
// managers that are not kept.
func (m *Managers) Close() error {
	m.mu.Lock()
	kept := m.kept
	m.kept, m.closed = nil, true
	m.mu.Unlock()
	var errs []error
	for _, k := range kept {
		errs = append(errs, k.Manager.Close())
	}
	return errors.Join(errs...)
}

// keptExec is a kept exec manager as an engine sees it: its Close stops nothing.
type keptExec struct {
	service.Manager
}

// Close does nothing: the manager's servers run until Managers.Close.
func (k *keptExec) Close() error { return nil }

// LastExit is the kept manager's (service.RestartCounter); ok is false when it keeps none.
func (k *keptExec) LastExit(unit string) (service.Exit, bool) {
	if c, ok := k.Manager.(service.RestartCounter); ok {
		return c.LastExit(unit)
	}
	return service.Exit{}, false
}

// Restarts is the kept manager's count (service.RestartCounter), 0 when it keeps none.
func (k *keptExec) Restarts(unit string) int {
	if c, ok := k.Manager.(service.RestartCounter); ok {
		return c.Restarts(unit)
	}
	return 0
}
