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
	"strings"

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
