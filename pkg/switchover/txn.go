package switchover

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// txn is one run of a Switch: the cleanups pushed by its stages, undone in reverse.
type txn struct {
	s        *Switch
	u        units
	res      *Result
	cleanups []func(ctx context.Context)
	promoted bool
	drained  bool
	// restoring is set once the cleanup that undoes the candidates is pushed.
	restoring bool
}

func (t *txn) logInfo(msg string, kv ...any) {
	if t.s.Log != nil {
		t.s.Log.Info(msg, kv...)
	}
}

func (t *txn) logWarn(msg string, kv ...any) {
	if t.s.Log != nil {
		t.s.Log.Warn(msg, kv...)
	}
}

// push adds a cleanup; cleanups run in reverse order when the switch ends.
func (t *txn) push(f func(ctx context.Context)) { t.cleanups = append(t.cleanups, f) }

// cleanupTimeout bounds the cleanups after ctx ended (a Ctrl-C): they are unit
// operations, not gates.
const cleanupTimeout = 2 * time.Minute

func (t *txn) run(ctx context.Context) (res *Result, err error) {
	s := t.s
	prev, err := t.previous()
	if err != nil {
		return t.res, fmt.Errorf("reading what serves before switching %s: %w", s.Unit, err)
	}
	t.res.Previous = prev
	t.res.Replaced = t.modelSwitch()
	if p := progressOf(ctx); p != nil {
		p(s.Unit, t.servedAddr())
		defer p(s.Unit, "")
	}
	defer func() {
		cctx := ctx
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
		}
		for i := len(t.cleanups) - 1; i >= 0; i-- {
			t.cleanups[i](cctx)
		}
		if !t.promoted && err == nil {
			err = &FailedError{Result: t.res}
		}
	}()
	// Undrain last, when what serves at the end passed.
	t.push(func(ctx context.Context) {
		if !t.drained || s.Undrain == nil || !t.res.Serving() || ctx.Err() != nil {
			return
		}
		if herr := s.Undrain(ctx); herr != nil {
			t.logWarn("switch: the undrain hook failed", "unit", s.Unit, "err", herr)
			return
		}
		t.res.Undrained = true
	})
	// Before it: gate what was restored, with its own names.
	t.push(func(ctx context.Context) {
		if t.promoted || !t.res.Restored || ctx.Err() != nil {
			return
		}
		v := Verdict{Pass: true}
		for _, p := range prev {
			pv, gerr := s.Gate(ctx, p)
			if gerr != nil {
				t.res.RestoredVerdict = nil
				t.logWarn("switch: gating what was restored failed", "unit", p.Unit, "err", gerr)
				return
			}
			if !pv.Pass {
				v = pv
			}
		}
		if v.Pass && v.Summary == "" {
			v.Summary = "passed"
		}
		t.res.RestoredVerdict = &v
	})
	if err := t.stopReplaced(ctx); err != nil {
		return t.res, &FailedError{Result: t.res, Why: err}
	}
	for _, c := range s.Candidates {
		if err := ctx.Err(); err != nil {
			return t.res, &FailedError{Result: t.res, Why: fmt.Errorf("switching %s: %w", s.Unit, err)}
		}
		passed, gerr := t.try(ctx, c)
		if gerr != nil {
			return t.res, &FailedError{Result: t.res, Why: gerr}
		}
		if passed {
			if err := t.promote(ctx, c); err != nil {
				return t.res, err
			}
			return t.res, nil
		}
	}
	return t.res, &FailedError{Result: t.res}
}

// modelSwitch reports whether the switch takes over other recipes' units.
func (t *txn) modelSwitch() bool {
	_, ok := t.s.Manager.(Disabler)
	return ok && len(t.s.Replaces) > 0
}

// previous returns the servers that serve now and that a reboot starts: the replaced
// units of a model switch, else the service's persistent unit.
func (t *txn) previous() ([]Server, error) {
	if t.modelSwitch() {
		return t.replacedServers()
	}
	content, ok, err := t.u.persistent(t.s.Unit)
	if err != nil {
		return nil, err
	}
	if ok {
		srv, err := Identify(t.s.Unit, content)
		if err != nil {
			return nil, err
		}
		return []Server{srv}, nil
	}
	return nil, nil
}

// replacedServers reads the servers of the replaced units from their unit files.
func (t *txn) replacedServers() ([]Server, error) {
	var out []Server
	dir := filepath.Dir(t.s.Manager.UnitPath(t.s.Unit))
	for _, u := range t.s.Replaces {
		content, err := readUnit(filepath.Join(dir, u))
		if err != nil {
			return nil, fmt.Errorf("reading replaced unit %s: %w", u, err)
		}
		srv, err := Identify(u, content)
		if err != nil {
			return nil, err
		}
		out = append(out, srv)
	}
	return out, nil
}

// drain runs the drain hook once, before the first change to what serves (on a first
// install nothing serves: nothing is drained, and the node is put in by whoever watches
// its health).
func (t *txn) drain(ctx context.Context) {
	if t.drained || len(t.res.Previous) == 0 {
		return
	}
	t.drained = true
	if t.s.Drain == nil {
		return
	}
	if err := t.s.Drain(ctx); err != nil {
		t.logWarn("switch: the drain hook failed; switching anyway", "unit", t.s.Unit, "err", err)
		return
	}
	t.res.Drained = true
}

// stopReplaced stops the replaced units for this boot (they stay enabled: a kill or a
// reboot before a candidate passes starts them again); the cleanup starts them again
// unless a candidate was promoted, and then disables them.
func (t *txn) stopReplaced(ctx context.Context) error {
	if len(t.s.Replaces) == 0 {
		return nil
	}
	if !t.modelSwitch() {
		t.logWarn("this service manager cannot take the replaced recipes' units out of the boot; replaces: is not applied", "manager", t.s.Manager.Kind())
		return nil
	}
	t.drain(ctx)
	var stopped []string
	t.push(func(ctx context.Context) {
		if t.promoted {
			return
		}
		for _, u := range stopped {
			if err := t.s.Manager.Start(ctx, u); err != nil {
				t.res.RestoreErr = errors.Join(t.res.RestoreErr, fmt.Errorf("starting replaced unit %s again: %w", u, err))
				continue
			}
			t.res.Restored = true
			t.logInfo("started a replaced unit again", "unit", u)
		}
	})
	for _, u := range t.s.Replaces {
		if err := t.s.Manager.Stop(ctx, u); err != nil {
			return fmt.Errorf("stopping replaced unit %s: %w", u, err)
		}
		stopped = append(stopped, u)
		t.logInfo("stopped a replaced unit for this boot", "unit", u, "by", t.s.Unit)
	}
	return nil
}

// pushRestore pushes, once, the cleanup that undoes the candidates: the staged unit is
// dropped, and the persistent unit restarted (what served before) or the service
// stopped (a first install, or a model switch whose replaced units come back).
func (t *txn) pushRestore() {
	if t.restoring {
		return
	}
	t.restoring = true
	t.push(func(ctx context.Context) {
		if t.promoted {
			return
		}
		unit := t.s.Unit
		if _, err := t.u.discard(ctx, unit); err != nil {
			t.res.RestoreErr = errors.Join(t.res.RestoreErr, fmt.Errorf("dropping the staged unit of %s: %w", unit, err))
		}
		_, persistent, err := t.u.persistent(unit)
		if err != nil {
			t.res.RestoreErr = errors.Join(t.res.RestoreErr, err)
		}
		if !persistent || t.modelSwitch() {
			if err := t.s.Manager.Stop(ctx, unit); err != nil {
				t.res.RestoreErr = errors.Join(t.res.RestoreErr, fmt.Errorf("stopping %s, which failed the gate: %w", unit, err))
			}
			return
		}
		if t.s.Before != nil {
			// The port must be free or the unit's own before the last good unit starts.
			if err := t.s.Before(ctx, Candidate{}); err != nil {
				t.res.RestoreErr = errors.Join(t.res.RestoreErr, err)
				return
			}
		}
		if err := t.s.Manager.Restart(ctx, unit); err != nil {
			t.res.RestoreErr = errors.Join(t.res.RestoreErr, fmt.Errorf("restarting the last unit that passed (%s): %w", unit, err))
			return
		}
		t.res.Restored = true
		t.logInfo("switch: restored the last unit that passed", "unit", unit)
	})
}

// promote keeps candidate c: its staged unit becomes the persistent, enabled one (the
// process is not restarted), then the replaced units are taken out of the boot.
func (t *txn) promote(ctx context.Context, c Candidate) error {
	s := t.s
	if err := t.u.promote(ctx, s.Unit); err != nil {
		return fmt.Errorf("keeping the unit of %s that passed: %w", s.Unit, err)
	}
	t.promoted = true
	w := t.res.Tried[len(t.res.Tried)-1].Server
	t.res.Winner, t.res.WinnerProfile = &w, c.Profile
	var recErr error
	if s.Promoted != nil {
		if err := s.Promoted(ctx, w); err != nil {
			recErr = fmt.Errorf("recording what serves after promoting %s: %w", s.Unit, err)
		}
	}
	if d, ok := s.Manager.(Disabler); ok {
		for _, u := range s.Replaces {
			if err := d.Disable(ctx, u); err != nil {
				return fmt.Errorf("disabling replaced unit %s: %w", u, err)
			}
			t.logInfo("stopped and disabled a replaced unit", "unit", u, "by", s.Unit)
		}
	}
	t.logInfo("switch: promoted", "unit", s.Unit, "profile", c.Profile)
	return recErr
}
