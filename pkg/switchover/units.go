package switchover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/sglprov/sglprov/pkg/service"
)

// units is a service manager as the transaction uses it: stage for this boot, promote,
// discard, and the unit a reboot starts. With a service.Stager (systemd) that is the
// runtime/persistent split; without one (exec) the unit is installed as it is tried and
// the last unit that passed is kept under the state dir (a reboot ends an exec-managed
// server anyway).
type units struct {
	m        service.Manager
	st       service.Stager
	stateDir string
}

func newUnits(m service.Manager, stateDir string) units {
	st, _ := m.(service.Stager)
	return units{m: m, st: st, stateDir: stateDir}
}

// persistent returns the unit a reboot (or a restore) starts: the file in
// /etc/systemd/system, or the last-known-good copy.
func (u units) persistent(unit string) ([]byte, bool, error) {
	if u.st != nil {
		if !u.st.Persistent(unit) {
			return nil, false, nil
		}
		b, err := readUnit(u.m.UnitPath(unit))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading unit %s: %w", unit, err)
		}
		return b, true, nil
	}
	return service.LoadLastKnownGood(u.stateDir, unit)
}

// inEffect reports whether content is the unit in effect: nothing staged (a staged unit
// is a candidate that has not passed) and the persistent or installed file is content.
func (u units) inEffect(unit string, content []byte) bool {
	if u.st != nil && u.st.Staged(unit) {
		return false
	}
	b, err := readUnit(u.m.UnitPath(unit))
	return err == nil && bytes.Equal(b, content)
}

// stage puts content in effect for this boot; it reports whether the unit in effect
// changed.
func (u units) stage(ctx context.Context, unit string, content []byte) (bool, error) {
	if u.st != nil {
		return u.st.Stage(ctx, unit, content)
	}
	return u.m.Install(ctx, unit, content)
}

// promote makes the unit in effect the one a reboot starts, enabled, and keeps a copy as
// last-known-good.
func (u units) promote(ctx context.Context, unit string) error {
	if u.st != nil {
		if err := u.st.Commit(ctx, unit); err != nil {
			return err
		}
	}
	b, err := readUnit(u.m.UnitPath(unit))
	if err != nil {
		return fmt.Errorf("reading the unit that passed: %w", err)
	}
	return service.SaveLastKnownGood(u.stateDir, unit, b)
}

// discard drops what was staged, putting the persistent unit in effect again.
func (u units) discard(ctx context.Context, unit string) (bool, error) {
	if u.st != nil {
		return u.st.Discard(ctx, unit)
	}
	b, ok, err := service.LoadLastKnownGood(u.stateDir, unit)
	if err != nil || !ok {
		return false, err
	}
	return u.m.Install(ctx, unit, b)
}

// RestartServing restarts unit as it serves between switches, without rendering anything:
// a staged unit (a switch whose gate did not finish) is dropped first, so that the unit in
// effect is the one a reboot starts (the persistent file under a service.Stager, else the
// last-known-good copy under stateDir when there is one), then the manager restarts it.
func RestartServing(ctx context.Context, m service.Manager, stateDir, unit string) error {
	if _, err := newUnits(m, stateDir).discard(ctx, unit); err != nil {
		return fmt.Errorf("putting the unit that passed of %s back in effect: %w", unit, err)
	}
	if err := m.Restart(ctx, unit); err != nil {
		return fmt.Errorf("restarting %s: %w", unit, err)
	}
	return nil
}
