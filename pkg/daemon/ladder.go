package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sglprov/sglprov/pkg/logval"
)

// The remediation ladder: what the daemon does, rung by rung, about a node whose canary
// keeps failing. Each rung is logged and counted (sglprov_remediation_total{rung, result});
// a rung that cannot apply here is skipped (result "skipped") and the next is tried at once.
//
//  1. restart: the service restarts with the profile it runs (at most MaxRestarts times in
//     one climb, each judged by the canaries that follow it); in a group of nodes (Group)
//     a worker restarts at once and the head after its workers have started again;
//  2. regate: the whole gate, every case of the recipe's smoke step, against the server as
//     it runs (a canary case that fails alone is not the node failing);
//  3. next_profile: the recipe's next candidate profile is installed and gated, then the one
//     after it, until one passes or none is left (skipped on a group's worker, which
//     follows its head's profile instead);
//  4. previous_generation: the node's previous generation is reinstalled and gated
//     (skipped on a group's worker);
//  5. give_up: the node is unhealthy (the drain hook runs); the canary goes on, and a pass
//     recovers it by itself; the ladder is climbed again after 2, 4, 8 ... 64 failed checks
//     (a restart picks up a cause fixed on disk), the node staying unhealthy meanwhile.
//
// Rungs 2 to 4 judge themselves (their gate): when one fails, the next is tried in the same
// round.

// Rung names: label values of sglprov_remediation_total.
const (
	RungRestart            = "restart"
	RungRegate             = "regate"
	RungNextProfile        = "next_profile"
	RungPreviousGeneration = "previous_generation"
	RungGiveUp             = "give_up"
	// RungFollowHead is a worker's switch to the profile its group's head runs (not a
	// rung of the climb: it is taken whenever the head's profile differs).
	RungFollowHead = "follow_head"
)

var rungs = []string{RungRestart, RungRegate, RungNextProfile, RungPreviousGeneration, RungGiveUp}

// ErrNoRung is what a rung returns when it has nothing to do on this node (no other
// candidate profile): the ladder goes on to the next rung.
var ErrNoRung = errors.New("nothing to try")

// ErrNotAvailable is what Generations returns while the node keeps no generations.
var ErrNotAvailable = errors.New("not available")

// Remedies are the ladder's rungs 2 and 3, which need the recipe's gate and service.
type Remedies interface {
	// Regate runs the whole gate against the server as it runs: nil when it passes.
	Regate(ctx context.Context) error
	// ActiveProfile is the profile the service runs now ("" when it has none).
	ActiveProfile(ctx context.Context) string
	// NextProfile installs the first candidate profile not in tried and gates it; it
	// returns that profile and nil when it passes. ErrNoRung: no candidate is left.
	NextProfile(ctx context.Context, tried []string) (string, error)
}

// Generations is rung 4: the node's previous generation (what an earlier apply installed,
// kept whole).
type Generations interface {
	// RollBack reinstalls the previous generation and gates it: nil when it passes,
	// ErrNotAvailable when there is none to go back to.
	RollBack(ctx context.Context) error
}

// NoGenerations is the Generations of a node that keeps none: every RollBack is
// ErrNotAvailable, and the rung is logged as skipped.
type NoGenerations struct{}

// RollBack says there is no generation to go back to.
func (NoGenerations) RollBack(context.Context) error {
	return fmt.Errorf("%w: this node keeps no generations to roll back to", ErrNotAvailable)
}

// ladder is where the daemon is on the ladder in the current climb.
type ladder struct {
	rung     int      // index in rungs of the next rung to climb
	restarts int      // restarts in this climb
	tried    []string // profiles gated in this climb, the one running first
	gaveUp   bool
	why      string // what failed last when the ladder gave up
	giveUps  int    // climbs that ended in give_up since the node was last healthy
	retryIn  int    // checks before the ladder is climbed again after giving up
}

// canary runs one canary round and, past the failure bound, the ladder's next rung.
func (d *Loop) canary(ctx context.Context) {
	if d.o.Canary == nil {
		return
	}
	notReady := func(last string) {
		if ctx.Err() != nil || d.Health() != Healthy {
			return
		}
		d.o.Log.Warn("canary: the server does not answer", "last", last)
		d.setHealth(Degraded, "the server does not answer: "+last)
		d.status("canary waiting for the server: " + last)
	}
	// A server that was serving and stops answering is seen within one interval; one the
	// daemon has just (re)started gets the canary timeout to load its model.
	wait := d.o.Interval
	if d.fresh {
		wait = d.o.CanaryTimeout
	}
	lat, err := d.o.Canary(ctx, notReady, wait)
	if ctx.Err() != nil {
		// Stopping: the canary was cut short, not failed; nothing is restarted.
		d.o.Log.Info("canary cancelled: the daemon is stopping")
		return
	}
	d.m.observeCanary(lat, err)
	if err != nil {
		d.deaths.canaryFailed++
	}
	if err == nil {
		if d.followHead(ctx) || d.followLaunch(ctx) {
			return
		}
		d.noteWhole(ctx)
		d.fresh = false
		if d.failures > 0 || d.Health() != Healthy {
			d.o.Log.Info("canary passes again", "seconds", logval.Seconds(lat))
		}
		d.recovered()
		return
	}
	d.failures++
	reason := "canary failed: " + err.Error()
	d.o.Log.Warn("canary failed", "failures", d.failures, "err", err)
	if d.l.gaveUp {
		if d.l.retryIn > 0 {
			d.l.retryIn--
			d.setHealth(Unhealthy, d.l.why)
			return
		}
		d.o.Log.Info("climbing the remediation ladder again", "climb", d.l.giveUps+1)
		d.l = ladder{giveUps: d.l.giveUps, why: d.l.why}
	} else if d.failures < d.o.FailuresBeforeRestart {
		d.setHealth(Degraded, reason)
		return
	}
	d.climb(ctx, reason)
}

// recovered records a node serving correct answers again: the climb is over.
func (d *Loop) recovered() {
	d.failures, d.restarts = 0, 0
	d.l = ladder{}
	d.setHealth(Healthy, "")
}

// climbStep says what climb does after a rung: go on to the rung d.l.rung now names, or
// stop (a restart under way, judged by the next canaries; a rung that passed; the ladder
// given up; the daemon stopping).
type climbStep bool

const (
	climbOn   climbStep = false
	climbStop climbStep = true
)

// rungFunc is one rung of the ladder: it acts, judges itself where it has a gate, moves
// d.l.rung on when the next rung is to be tried, and returns the reason the node is still
// failing.
type rungFunc func(d *Loop, ctx context.Context, rung, reason string) (climbStep, string)

// rungTable holds each rung of rungs, by name.
var rungTable = map[string]rungFunc{
	RungRestart:            (*Loop).rungRestart,
	RungRegate:             (*Loop).rungRegate,
	RungNextProfile:        (*Loop).rungNextProfile,
	RungPreviousGeneration: (*Loop).rungPreviousGeneration,
	RungGiveUp:             (*Loop).rungGiveUp,
}

// climb runs the ladder from its current rung until a rung is under way (a restart,
// judged by the next canaries), a rung passes, or the ladder gives up.
func (d *Loop) climb(ctx context.Context, reason string) {
	for ctx.Err() == nil {
		rung := rungs[d.l.rung]
		step, why := rungTable[rung](d, ctx, rung, reason)
		if step == climbStop {
			return
		}
		reason = why
	}
}

// rungRestart restarts the service (a worker first follows a head that serves another
// launch line; a head first waits for its workers): the next canaries judge it, so the
// climb stops there.
func (d *Loop) rungRestart(ctx context.Context, rung, reason string) (climbStep, string) {
	if d.o.RestartService == nil {
		d.skip(rung, "the recipe has no service to restart")
		return climbOn, reason
	}
	if d.l.restarts >= d.o.MaxRestarts {
		d.l.rung++
		return climbOn, reason
	}
	// A worker whose head serves another launch line: a restart would bring it
	// back with its own line into the head's group; it follows the head instead.
	if d.followLaunch(ctx) {
		return climbStop, reason
	}
	d.l.restarts++
	d.restarts++
	d.failures = 0
	d.m.incRestarts()
	if g := d.o.Group; g != nil && !g.IsHead() {
		d.o.Log.Warn("remediation: restarting this worker's server: the head says the group does not serve; its new server waits at the rendezvous for the head", "rung", rung, "rank", g.Rank)
	} else if g != nil {
		// Not serving while it waits (the wait may take minutes): /healthz says so.
		if d.l.giveUps > 0 {
			d.setHealth(Unhealthy, d.l.why+" (waiting for the group's workers to start again)")
		} else {
			d.setHealth(Degraded, reason+" (waiting for the group's workers to start again)")
		}
		found := d.awaitWorkers(ctx)
		if ctx.Err() != nil {
			return climbStop, reason
		}
		d.o.Log.Warn("remediation: restarting the head's server", "rung", rung, "workers", found)
	}
	d.o.Log.Warn("remediation: restarting the service", "rung", rung, "restart", d.l.restarts, "of", d.o.MaxRestarts)
	err := d.o.RestartService(ctx)
	if ctx.Err() != nil {
		return climbStop, reason
	}
	if err != nil {
		d.o.Log.Error("remediation: restarting the service", "rung", rung, "err", err)
		d.m.rung(rung, "failed")
	} else {
		d.m.rung(rung, "ok")
	}
	d.fresh = true
	if d.l.giveUps > 0 {
		// Climbing again after giving up: still unhealthy (and drained) until a
		// canary passes.
		d.setHealth(Unhealthy, d.l.why+" (restarted the service again)")
	} else {
		d.setHealth(Degraded, reason+" (restarted the service)")
	}
	return climbStop, reason
}

// rungRegate runs the whole gate against the running server: the canary case's failure
// may not be the node's.
func (d *Loop) rungRegate(ctx context.Context, rung, reason string) (climbStep, string) {
	if d.o.Remedies == nil {
		d.skip(rung, "no gate to run")
		return climbOn, reason
	}
	d.o.Log.Warn("remediation: running the whole gate against the server", "rung", rung)
	d.status("remediation: running the whole gate")
	err := d.o.Remedies.Regate(ctx)
	if ctx.Err() != nil {
		return climbStop, reason
	}
	if d.rungDone(ctx, rung, err, "the whole gate passes; the canary case's failure was not the node's") {
		return climbStop, reason
	}
	reason = "the whole gate failed: " + err.Error()
	d.l.rung++
	return climbOn, reason
}

// rungNextProfile switches to the next candidate profile and gates it; the rung stays
// while candidates are left.
func (d *Loop) rungNextProfile(ctx context.Context, rung, reason string) (climbStep, string) {
	if g := d.o.Group; g != nil && !g.IsHead() {
		// Every rank runs the same arguments: a worker never picks a profile of
		// its own; it follows the head (followHead, at every canary).
		d.skip(rung, "a worker runs the head's profile; it follows the head, never picks one alone")
		return climbOn, reason
	}
	if d.o.Remedies == nil {
		d.skip(rung, "no service profiles to try")
		return climbOn, reason
	}
	if len(d.l.tried) == 0 {
		if p := d.o.Remedies.ActiveProfile(ctx); p != "" {
			d.l.tried = []string{p}
		}
	}
	d.o.Log.Warn("remediation: trying the next candidate profile", "rung", rung, "tried", fmt.Sprint(d.l.tried))
	d.status("remediation: trying the next profile")
	p, err := d.o.Remedies.NextProfile(ctx, d.l.tried)
	if ctx.Err() != nil {
		return climbStop, reason
	}
	if errors.Is(err, ErrNoRung) {
		d.skip(rung, "no other candidate profile is left")
		return climbOn, reason
	}
	d.l.tried = append(d.l.tried, p)
	if d.rungDone(ctx, rung, err, "profile "+p+" passes the gate") {
		return climbStop, reason
	}
	reason = fmt.Sprintf("profile %s failed the gate: %v", p, err)
	// the rung stays: the candidate after p next
	return climbOn, reason
}

// rungPreviousGeneration rolls back to the previous generation, judged by its gate.
func (d *Loop) rungPreviousGeneration(ctx context.Context, rung, reason string) (climbStep, string) {
	if gr := d.o.Group; gr != nil && !gr.IsHead() {
		d.skip(rung, "a worker does not roll back alone: its generation must be the head's")
		return climbOn, reason
	}
	g := d.o.Generations
	if g == nil {
		g = NoGenerations{}
	}
	d.o.Log.Warn("remediation: rolling back to the previous generation", "rung", rung)
	err := g.RollBack(ctx)
	if ctx.Err() != nil {
		return climbStop, reason
	}
	if errors.Is(err, ErrNotAvailable) {
		d.skip(rung, err.Error())
		return climbOn, reason
	}
	if d.rungDone(ctx, rung, err, "the previous generation passes the gate") {
		return climbStop, reason
	}
	reason = "the previous generation failed the gate: " + err.Error()
	d.l.rung++
	return climbOn, reason
}

// rungGiveUp marks the node unhealthy and sets when the ladder is climbed again.
func (d *Loop) rungGiveUp(_ context.Context, rung, reason string) (climbStep, string) {
	if !d.l.gaveUp {
		d.l.gaveUp = true
		d.l.why = "every rung of the remediation ladder failed; last: " + reason
		d.l.giveUps++
		d.l.retryIn = min(1<<min(d.l.giveUps, 30), maxRetryChecks)
		d.m.rung(rung, "ok")
		d.o.Log.Error("node unhealthy: every rung of the remediation ladder failed", "rung", rung, "reason", reason,
			"retry_seconds", logval.Seconds(time.Duration(d.l.retryIn+1)*d.o.Interval))
	}
	d.setHealth(Unhealthy, d.l.why)
	return climbStop, reason
}

// skip logs and counts a rung that cannot apply here and moves on to the next.
func (d *Loop) skip(rung, why string) {
	d.o.Log.Info("remediation: rung skipped", "rung", rung, "why", why)
	d.m.rung(rung, "skipped")
	d.l.rung++
}

// rungDone counts a rung that judged itself; it reports whether it passed (the node is
// then healthy again).
func (d *Loop) rungDone(ctx context.Context, rung string, err error, passed string) bool {
	if err != nil {
		d.o.Log.Warn("remediation: rung failed", "rung", rung, "err", err)
		d.m.rung(rung, "failed")
		return false
	}
	d.m.rung(rung, "ok")
	d.o.Log.Info("remediation: the node serves correct answers again", "rung", rung, "how", passed)
	d.noteWhole(ctx)
	d.fresh = false
	d.recovered()
	return true
}
