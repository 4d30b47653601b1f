package switchover

import (
	"context"
	"fmt"
)

// try stages candidate c, starts it and gates it against its own server. It reports
// whether it passed; an error is a gate that could not run. A candidate that changes what
// runs is gated on a side port first when the switch stages there (sideStaged), and
// moved to the served port and gated there again once it passed.
func (t *txn) try(ctx context.Context, c Candidate) (bool, error) {
	a := Attempt{Server: Server{Unit: t.s.Unit, Profile: c.Profile}}
	srv, err := t.prepare(ctx, c, &a)
	if err != nil {
		return t.notStarted(&a, err)
	}
	t.pushRestore()
	if !t.sideStaged() || (!c.Restart && t.u.inEffect(t.s.Unit, c.Content)) {
		return t.tryServed(ctx, c, &a, srv)
	}
	return t.trySide(ctx, c, &a, srv)
}

// notStarted records a as a candidate that did not start, for err.
func (t *txn) notStarted(a *Attempt, err error) (bool, error) {
	a.Error = err.Error()
	t.res.Tried = append(t.res.Tried, *a)
	t.logWarn("switch: candidate not started", "unit", t.s.Unit, "profile", a.Server.Profile, "err", err)
	return false, nil
}

// prepare reads candidate c's server from its unit (into a) and runs the checks before it
// starts (Before, and Await when it changes what runs); an error is why it cannot start.
func (t *txn) prepare(ctx context.Context, c Candidate, a *Attempt) (Server, error) {
	s := t.s
	if c.Err != nil {
		return Server{}, c.Err
	}
	srv, err := Identify(s.Unit, c.Content)
	if err != nil {
		return Server{}, err
	}
	srv.Profile = c.Profile
	a.Server = srv
	if s.Before != nil {
		if err := s.Before(ctx, c); err != nil {
			return srv, err
		}
	}
	if s.Await != nil && len(t.res.Previous) > 0 && (c.Restart || !t.u.inEffect(s.Unit, c.Content)) {
		if err := s.Await(ctx, srv); err != nil {
			return srv, err
		}
	}
	return srv, nil
}

// tryServed stages candidate c on the served port and starts it there, restarting the
// unit when its content changed (or c asks a restart), and gates it.
func (t *txn) tryServed(ctx context.Context, c Candidate, a *Attempt, srv Server) (bool, error) {
	s := t.s
	// Staging changes nothing that answers: the running process goes on until
	// restarted.
	changed, err := t.u.stage(ctx, s.Unit, c.Content)
	if err != nil {
		return t.notStarted(a, fmt.Errorf("staging the unit: %w", err))
	}
	if changed || c.Restart {
		if c.Profile != "" {
			t.logInfo("activating profile", "service", s.Unit, "profile", c.Profile)
		}
		t.drain(ctx)
		err = s.Manager.Restart(ctx, s.Unit)
	} else {
		// What runs already: gated as it serves.
		err = s.Manager.Start(ctx, s.Unit)
	}
	if err != nil {
		return t.notStarted(a, fmt.Errorf("starting %s: %w", s.Unit, err))
	}
	return t.gate(ctx, a, srv, changed)
}

// trySide starts candidate c on a side port and gates it there; once it passed, it is
// started on the served port and gated there again (toServed).
func (t *txn) trySide(ctx context.Context, c Candidate, a *Attempt, srv Server) (bool, error) {
	s := t.s
	if c.Profile != "" {
		t.logInfo("activating profile", "service", s.Unit, "profile", c.Profile)
	}
	// On a side port: the old server stops (both need the same GPUs), the served port
	// refuses connections rather than answering with a candidate that did not pass.
	pick := s.StagePort
	if pick == nil {
		pick = func(ctx context.Context, srv Server) (int, error) { return FreePort(ctx, srv.Host, srv.Port) }
	}
	port, err := pick(ctx, srv)
	if err != nil {
		return t.notStarted(a, fmt.Errorf("choosing a port to gate %s on before it serves: %w", s.Unit, err))
	}
	moved, err := WithPort(s.Unit, c.Content, port)
	if err != nil {
		return t.notStarted(a, err)
	}
	sideSrv, err := Identify(s.Unit, moved)
	if err != nil {
		return t.notStarted(a, err)
	}
	sideSrv.Profile = c.Profile
	if _, err := t.u.stage(ctx, s.Unit, moved); err != nil {
		return t.notStarted(a, fmt.Errorf("staging the unit on port %d: %w", port, err))
	}
	t.drain(ctx)
	if err := s.Manager.Restart(ctx, s.Unit); err != nil {
		return t.notStarted(a, fmt.Errorf("starting %s on port %d: %w", s.Unit, port, err))
	}
	a.StagePort = port
	t.logInfo("switch: candidate started on a side port", "unit", s.Unit, "profile", c.Profile, "served_model", srv.ServedModel, "port", port)
	v, err := s.Gate(ctx, sideSrv)
	if err != nil {
		return false, err
	}
	a.Verdict = &v
	if !v.Pass {
		t.res.Tried = append(t.res.Tried, *a)
		return false, nil
	}
	return t.toServed(ctx, c, a, srv)
}

// toServed stages candidate c, which passed on its side port, as rendered (still for this
// boot only), restarts it on the served port and gates it there again before it is
// promoted.
func (t *txn) toServed(ctx context.Context, c Candidate, a *Attempt, srv Server) (bool, error) {
	s := t.s
	if _, err := t.u.stage(ctx, s.Unit, c.Content); err != nil {
		return t.notStarted(a, fmt.Errorf("staging the unit on the served port: %w", err))
	}
	if err := s.Manager.Restart(ctx, s.Unit); err != nil {
		return t.notStarted(a, fmt.Errorf("starting %s on the served port: %w", s.Unit, err))
	}
	t.logInfo("switch: candidate passed on the side port, started on the served port", "unit", s.Unit, "profile", c.Profile, "port", srv.Port)
	sv, err := s.Gate(ctx, srv)
	if err != nil {
		return false, err
	}
	a.Served = &sv
	t.res.Tried = append(t.res.Tried, *a)
	return sv.Pass, nil
}

// gate gates the candidate of a on the served port, recording the verdict in a.
func (t *txn) gate(ctx context.Context, a *Attempt, srv Server, changed bool) (bool, error) {
	t.logInfo("switch: candidate started", "unit", t.s.Unit, "profile", srv.Profile, "served_model", srv.ServedModel, "changed", changed)
	v, err := t.s.Gate(ctx, srv)
	if err != nil {
		return false, err
	}
	a.Verdict = &v
	t.res.Tried = append(t.res.Tried, *a)
	return v.Pass, nil
}

// sideStaged reports whether a candidate that changes what runs is gated on a side port
// first: not on a first install (nothing served before: nothing to protect, and one load
// of the model rather than two), nor when the switch stages on the served port (or, by
// default, when it drains the node).
func (t *txn) sideStaged() bool {
	if len(t.res.Previous) == 0 {
		return false
	}
	switch t.s.Stage {
	case StageServed:
		return false
	case StageSidePort:
		return true
	}
	return t.s.Drain == nil
}
