// Package fakeunits is a service manager for tests that keeps systemd's unit state the
// way systemd does for what a switch uses: persistent units in a folder (the
// /etc/systemd/system of the test), runtime units in memory (/run, emptied by Reboot),
// enablement, and the running processes with the unit each started from. See README.md
// for how it differs from systemd.
package fakeunits

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/sglprov/sglprov/pkg/service"
)

// Manager is the fake. It implements service.Manager, service.Stager and Disable.
type Manager struct {
	// Dir is the persistent unit folder.
	Dir     string
	mu      sync.Mutex
	runtime map[string][]byte
	enabled map[string]bool
	active  map[string][]byte
	order   []string // active units, in the order they started
	// Events logs every operation that changes what runs or what a reboot starts.
	Events []string
	// OnEvent, when set, is called with each event as it happens; OnStart with each unit
	// started and the unit it started from. Both run with the fake's lock held: they must
	// not call the Manager.
	OnEvent func(event string)
	OnStart func(unit string, content []byte)
}

var (
	_ service.Manager = (*Manager)(nil)
	_ service.Stager  = (*Manager)(nil)
)

// New returns a fake whose persistent units live in dir.
func New(dir string) *Manager {
	return &Manager{Dir: dir, runtime: map[string][]byte{}, enabled: map[string]bool{}, active: map[string][]byte{}}
}

func (m *Manager) event(format string, a ...any) {
	e := fmt.Sprintf(format, a...)
	m.Events = append(m.Events, e)
	if m.OnEvent != nil {
		m.OnEvent(e)
	}
}

// Kind is systemd's.
func (m *Manager) Kind() string { return service.KindSystemd }

// UnitPath is the persistent file of unit.
func (m *Manager) UnitPath(unit string) string { return filepath.Join(m.Dir, unit) }

func (m *Manager) persistentLocked(unit string) ([]byte, bool) {
	b, err := os.ReadFile(m.UnitPath(unit))
	return b, err == nil
}

// effectiveLocked is the unit systemd would load: the runtime one, else the persistent.
func (m *Manager) effectiveLocked(unit string) ([]byte, bool) {
	if b, ok := m.runtime[unit]; ok {
		return b, true
	}
	return m.persistentLocked(unit)
}

// Install writes the persistent unit and enables it, as the systemd manager does.
func (m *Manager) Install(_ context.Context, unit string, content []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, _ := m.persistentLocked(unit)
	if err := os.WriteFile(m.UnitPath(unit), content, 0o644); err != nil {
		return false, err
	}
	m.enabled[unit] = true
	m.event("install %s", unit)
	return !bytes.Equal(old, content), nil
}

// Start starts unit from the unit in effect unless it runs.
func (m *Manager) Start(_ context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.active[unit]; ok {
		return nil
	}
	return m.startLocked(unit)
}

func (m *Manager) startLocked(unit string) error {
	b, ok := m.effectiveLocked(unit)
	if !ok {
		return fmt.Errorf("Unit %s not found.", unit)
	}
	m.active[unit] = b
	m.order = append(m.order, unit)
	m.event("start %s", unit)
	if m.OnStart != nil {
		m.OnStart(unit, b)
	}
	return nil
}

// Restart stops unit if it runs and starts it from the unit in effect.
func (m *Manager) Restart(_ context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked(unit)
	return m.startLocked(unit)
}

// Stop stops unit.
func (m *Manager) Stop(_ context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked(unit)
	return nil
}

func (m *Manager) stopLocked(unit string) {
	if _, ok := m.active[unit]; !ok {
		return
	}
	delete(m.active, unit)
	for i, u := range m.order {
		if u == unit {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
	m.event("stop %s", unit)
}

// State is "active" or "inactive".
func (m *Manager) State(_ context.Context, unit string) (string, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.active[unit]; ok {
		return "active", "running", nil
	}
	return "inactive", "dead", nil
}

// Failed reports false: the fake's servers do not crash.
func (m *Manager) Failed(context.Context, string) (bool, string, error) { return false, "", nil }

// Close does nothing.
func (m *Manager) Close() error { return nil }

// Stage writes a runtime unit, or drops it when content is the persistent unit, as
// service.Systemd.Stage does.
func (m *Manager) Stage(_ context.Context, unit string, content []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	effective, _ := m.effectiveLocked(unit)
	if p, ok := m.persistentLocked(unit); ok && bytes.Equal(p, content) {
		_, had := m.runtime[unit]
		delete(m.runtime, unit)
		return had && !bytes.Equal(effective, content), nil
	}
	m.runtime[unit] = append([]byte(nil), content...)
	m.event("stage %s", unit)
	return !bytes.Equal(effective, content), nil
}

// Commit writes the runtime unit as the persistent one and enables it.
func (m *Manager) Commit(_ context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.runtime[unit]; ok {
		if err := os.WriteFile(m.UnitPath(unit), b, 0o644); err != nil {
			return err
		}
		delete(m.runtime, unit)
	}
	if _, ok := m.persistentLocked(unit); !ok {
		return fmt.Errorf("enabling %s: no such unit file", unit)
	}
	m.enabled[unit] = true
	m.event("commit %s", unit)
	return nil
}

// Discard drops the runtime unit.
func (m *Manager) Discard(_ context.Context, unit string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, had := m.runtime[unit]
	delete(m.runtime, unit)
	if had {
		m.event("discard %s", unit)
	}
	return had, nil
}

// Staged reports whether unit has a runtime unit.
func (m *Manager) Staged(unit string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.runtime[unit]
	return ok
}

// Persistent reports whether unit's persistent file exists.
func (m *Manager) Persistent(unit string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.persistentLocked(unit)
	return ok
}

// Disable stops unit and removes its enablement.
func (m *Manager) Disable(_ context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked(unit)
	delete(m.enabled, unit)
	m.event("disable %s", unit)
	return nil
}

// Enabled reports whether unit is enabled.
func (m *Manager) Enabled(unit string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.enabled[unit]
}

// Running returns the unit unit's process started from (nil when it does not run).
func (m *Manager) Running(unit string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active[unit]
}

// Active returns the running units, in the order they started.
func (m *Manager) Active() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.order...)
}

// Clone returns a copy of the state (the persistent folder is shared: Reboot does not
// write it): what a kill -9 of the caller at this moment leaves behind.
func (m *Manager) Clone() *Manager {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := New(m.Dir)
	for k, v := range m.runtime {
		c.runtime[k] = v
	}
	for k, v := range m.enabled {
		c.enabled[k] = v
	}
	for k, v := range m.active {
		c.active[k] = v
	}
	c.order = append(c.order, m.order...)
	return c
}

// Reboot empties /run, stops every process and starts every enabled unit from its
// persistent file, in name order.
func (m *Manager) Reboot() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runtime = map[string][]byte{}
	m.active = map[string][]byte{}
	m.order = nil
	var units []string
	for u, on := range m.enabled {
		if on {
			units = append(units, u)
		}
	}
	sort.Strings(units)
	var errs []error
	for _, u := range units {
		if err := m.startLocked(u); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Plain returns m as a manager without staging or disabling, like the exec manager:
// units are installed as they are tried.
func (m *Manager) Plain() service.Manager { return plain{m} }

// plain embeds the interface only, so that none of the fake's other methods show.
type plain struct{ service.Manager }
