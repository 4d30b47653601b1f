// Package switchover is the one transaction by which sglprov changes the server a node
// runs: apply's gate (a new unit, profile, generation or model), the daemon's rungs (the
// next profile, the previous generation) and a roll back all run it, so that they stage,
// gate, keep and restore in the same order.
//
// The transaction, given a service manager, the candidate units in the order to try them,
// the units of other recipes the candidate takes over, a gate and the recipe's drain and
// undrain hooks:
//
//  1. drains the node (the drain hook runs) before anything that serves is stopped or any
//     candidate answers on the served port;
//  2. stops the replaced units for this boot only (they stay enabled);
//  3. stages each candidate for this boot only (systemd: a runtime unit under /run, which
//     a reboot empties), (re)starts it, and gates it against its own server: the served
//     model name, the model path and the port read from the candidate's own unit. Unless
//     the node is drained (a drain hook, or Stage says StageServed) or nothing served
//     before, a candidate is staged on a side port first (--port of a free port added to
//     its ExecStart=), so that it never answers on the served port before it passed;
//     once it passed there, the unit as rendered is staged, restarted on the served port
//     and gated again. A switch with Await first waits until the candidate may start (a worker of a
//     multi-node group: until its head runs the candidate's command line); a candidate
//     refused there fails with nothing changed;
//  4. on the first pass, promotes it: the staged unit becomes the persistent one and is
//     enabled, Promoted is told at once (the caller records what serves now, before any
//     hook or cleanup), and only then are the replaced units' enablement links removed.
//     Promote is the only point that moves the unit a reboot starts;
//  5. on no pass, undoes steps 3 and 2 in reverse (multistep's cleanup order): the staged
//     unit is dropped, the persistent unit (the last one that passed) is restarted or, on a
//     first install, the candidate stopped; the replaced units are started again; then
//     what came back is gated with its own unit's names;
//  6. undrains the node (the undrain hook runs) when what serves at the end passed.
//
// Whatever the exit (a pass, a fail, a kill -9 at any moment, a reboot), the unit enabled
// in /etc/systemd/system is the last one that passed: a candidate lives only under /run
// until it passes, and (service.Systemd) no longer than the process that staged it. A
// context made WithProgress is told when a switch starts and ends.
//
// The package imports no engine and no command layer: its callers hand it the manager,
// the rendered units, the gate and the hooks.
package switchover

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/service"
)

// Candidate is one unit the switch may put in service.
type Candidate struct {
	// Profile is the profile the unit was rendered with ("" without profiles).
	Profile string
	// Content is the rendered unit.
	Content []byte
	// Restart restarts the service even when the unit in effect is this one already
	// (what it reads on disk changed: new weights, a rebuilt kernel).
	Restart bool
	// Err, when set, is why the candidate cannot be tried (its unit did not render): it is
	// recorded as the candidate's failure and the next one is tried.
	Err error
}

// Verdict is a gate's judgement of one server.
type Verdict struct {
	Pass bool
	// Summary says what failed (or that every case passed).
	Summary string
}

// Gate judges the server s (its unit, served model, model path and port). An error is a
// gate that could not run at all (a usage error, ctx ended), not a server that failed.
type Gate func(ctx context.Context, s Server) (Verdict, error)

// Hook is the recipe's drain or undrain hook.
type Hook func(ctx context.Context) error

// Switch is one switch of a service.
type Switch struct {
	// Manager runs the units. A Manager that is also a service.Stager (systemd) stages
	// candidates for this boot only; others (exec) install them and keep the last unit
	// that passed under StateDir (service.SaveLastKnownGood).
	Manager  service.Manager
	StateDir string
	// Unit is the service's unit name.
	Unit string
	// Candidates are tried in order until one passes.
	Candidates []Candidate
	// Replaces are units of other recipes that this service takes over (a model switch):
	// stopped for this boot while candidates are tried, disabled only when one passes,
	// started again when none does. The Manager must be a Disabler.
	Replaces []string
	// Gate judges a server; required.
	Gate Gate
	// Before checks a candidate before it starts (its port is free or held by its own
	// server; the programs it execs are there): an error is the candidate's failure. Before
	// the last good unit is restarted it is called with the zero Candidate (no Content):
	// only what concerns the port then, since that unit's own content passed already.
	Before func(ctx context.Context, c Candidate) error
	// Await, when set, is waited on before a candidate that changes what runs is started,
	// when something served before (a worker of a multi-node group waits until its head
	// runs the candidate's command line): an error is the candidate's failure, and nothing
	// was stopped, staged or drained for it (what serves keeps serving). A first install
	// and a candidate that is what runs already do not wait.
	Await func(ctx context.Context, srv Server) error
	// Drain and Undrain are the recipe's hooks (nil: none). Drain runs before the first
	// change to what serves; Undrain at the end when what serves passed the gate.
	Drain, Undrain Hook
	// Promoted, when set, is called the moment the winner's unit became the persistent one,
	// before anything else (the replaced units' disabling, the cleanups, the undrain hook):
	// the caller records what serves now (the generation the unit runs), so that a kill at
	// any later moment leaves that record true. Its error is the switch's, once the replaced
	// units are disabled; the winner stays promoted.
	Promoted func(ctx context.Context, winner Server) error
	// Stage is where a candidate is gated before it serves (StageAuto: on a side port
	// unless there is a drain hook). A first install, with nothing serving before, is
	// gated on the served port whatever it says.
	Stage Staging
	// StagePort chooses the side port a candidate is gated on (nil: FreePort on the
	// candidate's host, avoiding its served port).
	StagePort func(ctx context.Context, srv Server) (int, error)
	// Log logs each stage (nil: nothing).
	Log *log.Logger
}

// Disabler is a Manager that can take a unit out of the boot (service.Systemd).
type Disabler interface {
	Disable(ctx context.Context, unit string) error
}

// Attempt is one candidate tried.
type Attempt struct {
	Server Server `json:"server"`
	// Error is set when the candidate could not be started.
	Error string `json:"error,omitempty"`
	// Verdict is the gate's, when it ran.
	Verdict *Verdict `json:"verdict,omitempty"`
	// StagePort is the side port the candidate was gated on before it served (0: it was
	// gated on the served port).
	StagePort int `json:"stage_port,omitempty"`
	// Served is the gate's verdict on the served port, after a pass on StagePort.
	Served *Verdict `json:"served,omitempty"`
}

// Why says why the candidate failed: the gate's summary, or why it did not start.
func (a Attempt) Why() string {
	switch {
	case a.Verdict == nil:
		return a.Error
	case a.Verdict.Pass && a.Served != nil:
		return fmt.Sprintf("passed on port %d, then on the served port %d: %s", a.StagePort, a.Server.Port, a.Served.Summary)
	case a.Verdict.Pass && a.StagePort != 0:
		return fmt.Sprintf("passed on port %d, then: %s", a.StagePort, a.Error)
	}
	return a.Verdict.Summary
}

// Result is what a switch did.
type Result struct {
	// Winner is the candidate that passed and was promoted (nil: none).
	Winner *Server
	// WinnerProfile is its profile.
	WinnerProfile string
	// Tried are the candidates tried, in order.
	Tried []Attempt
	// Previous are the servers that served before the switch (the persistent unit, or the
	// replaced units), empty on a first install.
	Previous []Server
	// Restored is set when no candidate passed and Previous was brought back;
	// RestoredVerdict is the gate's verdict on it (nil when it could not be gated) and
	// RestoreErr what went wrong bringing it back.
	Restored        bool
	RestoredVerdict *Verdict
	RestoreErr      error
	// Replaced is set for a model switch: Previous are the replaced units.
	Replaced bool
	// Drained is set when the drain hook ran; Undrained when the undrain hook ran.
	Drained, Undrained bool
}

// Serving reports whether the node serves, at the end, a server that passed the gate in
// this switch (the winner, or what was restored).
func (r *Result) Serving() bool {
	return r.Winner != nil || (r.Restored && r.RestoredVerdict != nil && r.RestoredVerdict.Pass)
}

// Untouched reports whether the switch changed nothing that serves: something served
// before, no candidate started (each was refused before its start), nothing was drained
// or restored.
func (r *Result) Untouched() bool {
	if r.Winner != nil || len(r.Previous) == 0 || r.Restored || r.RestoreErr != nil || r.Drained {
		return false
	}
	for _, a := range r.Tried {
		if a.Verdict != nil || a.Served != nil || a.StagePort != 0 {
			return false
		}
	}
	return true
}

// FailedError is the error of a switch in which no candidate passed; it says whether
// what served before serves again.
type FailedError struct {
	Result *Result
	// Why is the last candidate's failure, or what stopped the switch.
	Why error
}

// Error names each candidate's failure and what came back.
func (e *FailedError) Error() string {
	r := e.Result
	var parts []string
	for _, a := range r.Tried {
		parts = append(parts, a.Server.Label()+": "+a.Why())
	}
	msg := "no candidate passed the gate"
	if len(r.Tried) == 1 {
		msg = "the candidate failed the gate"
	}
	if len(parts) > 0 {
		msg += " (" + strings.Join(parts, " | ") + ")"
	} else if e.Why != nil {
		msg += ": " + e.Why.Error()
	}
	return msg + "; " + r.RestoredSentence()
}

// Unwrap returns why the switch stopped, when it did not end by trying every candidate.
func (e *FailedError) Unwrap() error { return e.Why }

// Serving reports whether what served before passed the gate again after the restore.
func (e *FailedError) Serving() bool { return e.Result.Serving() }

// RestoredSentence says what came back after no candidate passed, and whether it passed.
func (r *Result) RestoredSentence() string {
	if len(r.Previous) == 0 {
		if r.RestoreErr != nil {
			return "stopping the candidate failed: " + r.RestoreErr.Error()
		}
		return "there is no unit that passed before to restore"
	}
	what := describe(r.Previous)
	if r.Replaced {
		what = strings.Replace(what, "the last unit that passed", "what it replaced", 1)
	}
	switch {
	case !r.Restored && r.RestoreErr == nil:
		return what + " was left as it was (no candidate started)"
	case r.RestoreErr != nil:
		return fmt.Sprintf("restoring %s failed: %v", what, r.RestoreErr)
	case r.RestoredVerdict == nil:
		return what + " was restored and could not be gated again"
	case r.RestoredVerdict.Pass:
		return what + " was restored and passed the gate again"
	}
	return fmt.Sprintf("%s was restored and failed the gate too: %s", what, r.RestoredVerdict.Summary)
}

// describe names the servers that served before: "the last unit that passed (X)", or the
// replaced units.
func describe(prev []Server) string {
	var units []string
	for _, p := range prev {
		units = append(units, p.Unit)
	}
	return "the last unit that passed (" + strings.Join(units, ", ") + ")"
}

// Run runs the switch. It returns the result and nil when a candidate passed and was
// promoted, or a *FailedError (the result in it too) when none did; an error of the gate
// itself or of ctx ends the switch early, and is wrapped in the *FailedError after the
// restore.
func (s *Switch) Run(ctx context.Context) (*Result, error) {
	if s.Gate == nil {
		return nil, errors.New("switch: no gate")
	}
	t := &txn{s: s, u: newUnits(s.Manager, s.StateDir), res: &Result{}}
	return t.run(ctx)
}

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

// try stages candidate c, starts it and gates it against its own server. It reports
// whether it passed; an error is a gate that could not run. A candidate that changes what
// runs is gated on a side port first when the switch stages there (sideStaged), and
// moved to the served port and gated there again once it passed.
func (t *txn) try(ctx context.Context, c Candidate) (bool, error) {
	s := t.s
	a := Attempt{Server: Server{Unit: s.Unit, Profile: c.Profile}}
	fail := func(err error) (bool, error) {
		a.Error = err.Error()
		t.res.Tried = append(t.res.Tried, a)
		t.logWarn("switch: candidate not started", "unit", s.Unit, "profile", c.Profile, "err", err)
		return false, nil
	}
	if c.Err != nil {
		return fail(c.Err)
	}
	srv, err := Identify(s.Unit, c.Content)
	if err != nil {
		return fail(err)
	}
	srv.Profile = c.Profile
	a.Server = srv
	if s.Before != nil {
		if err := s.Before(ctx, c); err != nil {
			return fail(err)
		}
	}
	if s.Await != nil && len(t.res.Previous) > 0 && (c.Restart || !t.u.inEffect(s.Unit, c.Content)) {
		if err := s.Await(ctx, srv); err != nil {
			return fail(err)
		}
	}
	t.pushRestore()
	side := t.sideStaged()
	if !side || (!c.Restart && t.u.inEffect(s.Unit, c.Content)) {
		// Staging changes nothing that answers: the running process goes on until
		// restarted.
		changed, err := t.u.stage(ctx, s.Unit, c.Content)
		if err != nil {
			return fail(fmt.Errorf("staging the unit: %w", err))
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
			return fail(fmt.Errorf("starting %s: %w", s.Unit, err))
		}
		return t.gate(ctx, &a, srv, changed)
	}
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
		return fail(fmt.Errorf("choosing a port to gate %s on before it serves: %w", s.Unit, err))
	}
	moved, err := WithPort(s.Unit, c.Content, port)
	if err != nil {
		return fail(err)
	}
	sideSrv, err := Identify(s.Unit, moved)
	if err != nil {
		return fail(err)
	}
	sideSrv.Profile = c.Profile
	if _, err := t.u.stage(ctx, s.Unit, moved); err != nil {
		return fail(fmt.Errorf("staging the unit on port %d: %w", port, err))
	}
	t.drain(ctx)
	if err := s.Manager.Restart(ctx, s.Unit); err != nil {
		return fail(fmt.Errorf("starting %s on port %d: %w", s.Unit, port, err))
	}
	a.StagePort = port
	t.logInfo("switch: candidate started on a side port", "unit", s.Unit, "profile", c.Profile, "served_model", srv.ServedModel, "port", port)
	v, err := s.Gate(ctx, sideSrv)
	if err != nil {
		return false, err
	}
	a.Verdict = &v
	if !v.Pass {
		t.res.Tried = append(t.res.Tried, a)
		return false, nil
	}
	// It passed: the unit as rendered is staged (still for this boot only) and restarted
	// on the served port, and gated there again before it is promoted.
	if _, err := t.u.stage(ctx, s.Unit, c.Content); err != nil {
		return fail(fmt.Errorf("staging the unit on the served port: %w", err))
	}
	if err := s.Manager.Restart(ctx, s.Unit); err != nil {
		return fail(fmt.Errorf("starting %s on the served port: %w", s.Unit, err))
	}
	t.logInfo("switch: candidate passed on the side port, started on the served port", "unit", s.Unit, "profile", c.Profile, "port", srv.Port)
	sv, err := s.Gate(ctx, srv)
	if err != nil {
		return false, err
	}
	a.Served = &sv
	t.res.Tried = append(t.res.Tried, a)
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
