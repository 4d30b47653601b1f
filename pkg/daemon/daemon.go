// Package daemon keeps a provisioned node right: it applies the recipe, then watches the
// driver facts and runs a canary smoke case at an interval; a changed driver re-applies,
// a driver/library mismatch reports "reboot required" and leaves the service alone, and
// repeated canary failures climb a remediation ladder (restart, the whole gate, the next
// profile, the previous generation) and, when every rung fails, mark the node unhealthy,
// running the recipe's drain hook; a node that passes again recovers by itself.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// Options are the daemon's parts; every side effect is a function so that tests can
// stand in for it.
type Options struct {
	// Apply runs one apply of the recipe.
	Apply func(ctx context.Context) (*engine.Report, error)
	// Detect reads the GPU facts (nil when the recipe needs none).
	Detect func(ctx context.Context) (*gpu.Facts, error)
	// Canary runs one smoke case against the service. While it waits for the server to
	// answer, it calls notReady with what it last saw ("connection refused", "HTTP 503"):
	// the node is not healthy from that moment, not only once the wait gives up. A canary
	// cut short because ctx ended (the daemon stopping) is neither a pass nor a failure.
	// The readiness wait is bounded by wait: one interval for a server that was serving,
	// CanaryTimeout for one the daemon has just restarted.
	Canary func(ctx context.Context, notReady func(last string), wait time.Duration) (time.Duration, error)
	// CanaryTimeout bounds the readiness wait of the canary after the daemon restarted the
	// service (default 2 min).
	CanaryTimeout time.Duration
	// Remedies are the remediation ladder's regate and next-profile rungs (nil: skipped).
	Remedies Remedies
	// Generations is the ladder's previous-generation rung (nil: NoGenerations).
	Generations Generations
	// RestartService restarts the served model's service (nil: none to restart).
	RestartService func(ctx context.Context) error
	// Notify sends an sd_notify message ("READY=1", "STATUS=...", "WATCHDOG=1").
	Notify func(state string) error
	// WatchdogInterval is how often to send WATCHDOG=1 (0: never).
	WatchdogInterval time.Duration
	// Interval between checks (default 60 s).
	Interval time.Duration
	// FailuresBeforeRestart consecutive canary failures restart the service (default 3).
	FailuresBeforeRestart int
	// MaxRestarts is how many restarts the ladder's first rung makes in one climb before
	// the next rung (default 1).
	MaxRestarts int
	// Recipe is the recipe's name: the `recipe` label of its metrics.
	Recipe string
	// Metrics records what happens (may be nil).
	Metrics *Metrics
	// AfterCheck is called after the first apply and after every round (to write the
	// metrics textfile); may be nil.
	AfterCheck func()
	// Server says how many times the service manager restarted the model server after it
	// died since it last started it, and how it last died (nil, or ok false: not counted):
	// the daemon logs each death and counts it (ServerDeaths).
	Server func() (ServerDeaths, bool)
	// Inputs returns a digest of what an apply reads (the recipe and the facts): a change
	// whose switch failed while what served before passed again is tried again only once
	// it differs. nil: such a change is never retried by itself (a SIGHUP or a driver
	// change still applies).
	Inputs func(ctx context.Context) (string, error)
	// Reapply, when it delivers, applies the recipe at once (the recipe was re-read on
	// SIGHUP), the value saying why; nil: never.
	Reapply <-chan string
	// Hook runs the recipe's drain or undrain hook (HookUnhealthy, HookHealthy) with the
	// node's health and its reason; nil when the recipe has none. It is called once per
	// transition between serving correct answers and not, and must bound its own time.
	Hook func(ctx context.Context, hook string, h Health, reason string) error
	// Group is this node's place in a group of nodes that serve one model together (nil:
	// a single node).
	Group *Group
	// Log is the daemon's logger.
	Log *log.Logger
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.FailuresBeforeRestart <= 0 {
		o.FailuresBeforeRestart = 3
	}
	if o.MaxRestarts <= 0 {
		o.MaxRestarts = 1
	}
	if o.CanaryTimeout <= 0 {
		o.CanaryTimeout = 2 * time.Minute
	}
	if o.Notify == nil {
		o.Notify = func(string) error { return nil }
	}
	if o.Log == nil {
		o.Log = log.New(nil)
	}
	o.groupDefaults()
}

// Health is what the daemon says of the node.
type Health string

// The node's health states; they are label values of sglprov_node_health, so they have
// no spaces.
const (
	Healthy        Health = "healthy"
	Degraded       Health = "degraded"
	Unhealthy      Health = "unhealthy"
	RebootRequired Health = "reboot_required"
	ApplyFailed    Health = "apply_failed"
	// Stopped is the state the daemon leaves in its last textfile as it stops.
	Stopped Health = "stopped"
)

// Hook names: the recipe's fields.
const (
	HookUnhealthy = "on_unhealthy"
	HookHealthy   = "on_healthy"
)

// ErrNoHook is what Options.Hook returns when the recipe has no such hook: nothing ran, and
// hook_runs_total counts nothing.
var ErrNoHook = errors.New("the recipe has no such hook")

// Words returns the state for people (systemctl status): "reboot required".
func (h Health) Words() string { return strings.ReplaceAll(string(h), "_", " ") }

// Loop is the daemon's loop over one recipe: its checks, its applies, its remediation ladder
// and its health.
type Loop struct {
	o        Options
	driver   string
	failures int
	restarts int
	// applyFailures counts the applies that failed since the last one that passed;
	// retryIn is the checks still to wait before the next retry.
	applyFailures int
	retryIn       int
	mu            sync.Mutex // guards health, which notReady may set from the canary's goroutine
	health        Health
	reason        string // why the node is not healthy, for /healthz and the hooks
	m             *recipeMetrics
	// hooks runs the drain and undrain hooks beside the loop.
	hooks hookRunner
	// l is the remediation ladder's climb; fresh is set when the daemon has (re)started
	// the server since the last canary.
	l     ladder
	fresh bool
	// gpu is what the GPUs' counters said at the last check.
	gpu gpuFault
	// pending is the change whose switch failed while the node serves what it served
	// before (nil: none); it is tried again only when the inputs differ from its own.
	pending *pendingChange
	// unfollowed is the head's profile this worker failed to switch to ("": none).
	unfollowed, unfollowedWhy string
	// unmatched is the head's launch (its differences from this worker's) that this
	// worker's apply could not follow ("": none), and why the group is broken.
	unmatched, unmatchedWhy string
	// unsettled is the head's other launch line this worker has seen since unsettledSince
	// and waits on (Group.Settle) before it follows.
	unsettled      string
	unsettledSince time.Time
	// whole is, on a group's head, its rendezvous when the group last served (nil: not
	// seen).
	whole *multinode.Rendezvous
	// deaths is what the daemon knows of the server's deaths (noteServerDeaths).
	deaths deathCount
}

// pendingChange is a change of the recipe whose switch failed the gate; the unit that
// served before was restored and passed again.
type pendingChange struct {
	inputs string // Options.Inputs when it was tried ("" when unknown)
	why    string
}

// New returns a daemon with opts.
func New(opts Options) *Loop {
	opts.defaults()
	return &Loop{o: opts, m: opts.Metrics.forRecipe(opts.Recipe), hooks: hookRunner{ended: make(chan struct{}, 1)}}
}

// Health returns the node's health as the daemon last saw it.
func (d *Loop) Health() Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.health
}

// Run applies the recipe, reports READY, then checks at every interval until ctx ends.
// It returns nil when ctx is cancelled.
func (d *Loop) Run(ctx context.Context) error {
	// Every switch the daemon runs (its applies, its rungs) says when it starts and ends:
	// the metrics say a switch is in progress, and /healthz answers from the served port.
	ctx = switchover.WithProgress(ctx, d.m.setSwitching)
	// The watchdog is fed from the start: the first apply can take hours (kernel builds,
	// downloads) and is not a hang.
	if d.o.WatchdogInterval > 0 {
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			t := time.NewTicker(d.o.WatchdogInterval)
			defer t.Stop()
			_ = d.o.Notify("WATCHDOG=1")
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
					_ = d.o.Notify("WATCHDOG=1")
				}
			}
		}()
	}
	d.status("applying the recipe")
	d.apply(ctx, "start")
	if ctx.Err() != nil {
		d.stop(ctx)
		return nil
	}
	if f, err := d.detect(ctx); err == nil && f != nil {
		d.driver = f.DriverVersion
	}
	_ = d.o.Notify("READY=1")
	d.status(d.health.Words())
	d.startHooks(ctx, true)
	d.afterCheck()

	tick := time.NewTicker(d.o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.stop(ctx)
			return nil
		case <-d.hooks.ended:
			// A hook stopped because the node's health turned meanwhile: the other
			// one runs now, not an interval later.
			d.startHooks(ctx, false)
		case why := <-d.o.Reapply:
			if d.unchangedSincePending(ctx) {
				d.o.Log.Warn("the recipe and the facts are those of the change whose switch failed; not trying it again", "why", why, "failed", d.pending.why)
				continue
			}
			d.o.Log.Info("applying the recipe again", "why", why)
			d.status("applying the recipe")
			d.apply(ctx, why)
			if ctx.Err() != nil {
				d.stop(ctx)
				return nil
			}
			d.status(d.Health().Words())
			d.startHooks(ctx, true)
			d.afterCheck()
		case <-tick.C:
			d.Check(ctx)
			if ctx.Err() != nil {
				d.stop(ctx)
				return nil
			}
			d.status(d.health.Words())
			d.startHooks(ctx, true)
			d.afterCheck()
		}
	}
}

// afterCheck marks the heartbeat (the metrics endpoint's too, where no textfile is
// written) and calls AfterCheck.
func (d *Loop) afterCheck() {
	d.noteServerDeaths()
	d.o.Metrics.beat()
	if d.o.AfterCheck != nil {
		d.o.AfterCheck()
	}
}

// hookRunner is the state of the drain and undrain hooks, which run in a goroutine of
// their own so that a hook that hangs until its timeout never holds up the checks (nor
// /healthz, which they update). mu guards every field but ended.
type hookRunner struct {
	mu sync.Mutex
	// serving is what the hooks last told the fleet: "" (nothing yet), HookHealthy or
	// HookUnhealthy.
	serving string
	// failed is the hook whose last run failed: it runs again at the next check, not as
	// soon as it ended.
	failed string
	// running is the hook running now, nil when none.
	running *hookRun
	wg      sync.WaitGroup
	// ended is signalled when a hook ends (buffered, never blocks the hook's goroutine).
	ended chan struct{}
}

// hookRun is one run of a hook.
type hookRun struct {
	hook   string
	cancel context.CancelFunc
	// turned is set when the node's health turned while the hook ran: the hook was
	// stopped, and the other one is due.
	turned bool
}

// startHooks starts the drain hook when the node has stopped serving correct answers since
// the hooks last spoke, and the undrain hook when it serves them again: once per
// transition, the first decision included (a node that comes up healthy is put in). The
// hook runs beside the loop; while it runs no other starts, and when the health turns
// meanwhile it is stopped (its process group killed) so that the other can run. A hook
// that failed runs again only from a check (check true), so a failing hook runs once per
// check, not in a loop.
func (d *Loop) startHooks(ctx context.Context, check bool) {
	if ctx.Err() != nil {
		return
	}
	d.mu.Lock()
	h, reason := d.health, d.reason
	d.mu.Unlock()
	want := HookUnhealthy
	if h == Healthy {
		want = HookHealthy
	}
	hr := &d.hooks
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if run := hr.running; run != nil {
		if run.hook != want && !run.turned {
			run.turned = true
			d.o.Log.Info("the node's health turned while the hook ran; stopping it", "hook", run.hook, "node_health", string(h))
			run.cancel()
		}
		return
	}
	if want == hr.serving || (!check && want == hr.failed) {
		return
	}
	if d.o.Hook == nil {
		hr.serving = want
		return
	}
	hctx, cancel := context.WithCancel(ctx)
	run := &hookRun{hook: want, cancel: cancel}
	hr.running = run
	hr.wg.Add(1)
	go func() {
		defer hr.wg.Done()
		err := d.o.Hook(hctx, want, h, reason)
		cancel()
		hr.mu.Lock()
		hr.running = nil
		switch {
		case errors.Is(err, ErrNoHook):
			// Nothing ran: nothing to count.
			hr.serving, hr.failed = want, ""
		case err == nil:
			hr.serving, hr.failed = want, ""
			d.m.hook(want, "ok")
		case run.turned:
			d.o.Log.Info("the hook was stopped: the node's health turned", "hook", want, "err", err)
			d.m.hook(want, "failed")
		case ctx.Err() != nil:
			// The daemon stops: a hook cut short says nothing.
		default:
			// Tried again at the next check: a drain that did not reach the router must
			// not be taken as done.
			hr.failed = want
			d.o.Log.Error("the hook failed; it runs again at the next check", "hook", want, "err", err)
			d.m.hook(want, "failed")
		}
		hr.mu.Unlock()
		select {
		case hr.ended <- struct{}{}:
		default:
		}
	}()
}

// waitHooks waits for the hook that runs now, if any, to end.
func (d *Loop) waitHooks() { d.hooks.wg.Wait() }

// Check runs one round: the driver facts first, then the canary.
func (d *Loop) Check(ctx context.Context) {
	f, err := d.detect(ctx)
	switch {
	case errors.Is(err, gpu.ErrDriverMismatch):
		if d.health != RebootRequired {
			// err says "reboot required" itself.
			d.o.Log.Error("the NVIDIA driver and its kernel module differ; the service is left as it is", "err", err)
		}
		d.setHealth(RebootRequired, err.Error())
		d.m.setRebootRequired(true)
		return
	case err != nil && !errors.Is(err, gpu.ErrNoGPU):
		d.o.Log.Error("reading GPU facts", "err", err)
	case f != nil:
		d.m.setRebootRequired(false)
		d.o.Metrics.setGPU(d.o.Recipe, f)
		// Hardware gone wrong under the server (a new uncorrectable ECC error, a pending
		// remap, an Xid that needs a reset): unhealthy at once, and no rung of the ladder
		// (a restart or another profile cannot mend a GPU) until its cause is gone.
		if fault := d.gpu.check(f); fault != "" {
			if d.health != Unhealthy || !strings.HasPrefix(d.reason, "GPU fault: ") {
				d.o.Log.Error("a GPU under the service went wrong; drain the node and reset the GPU or reboot", "fault", fault)
			}
			d.setHealth(Unhealthy, "GPU fault: "+fault)
			return
		}
		if d.health == Unhealthy && strings.HasPrefix(d.reason, "GPU fault: ") {
			d.o.Log.Info("the GPU fault is gone; checking the service again")
			d.setHealth(Degraded, "GPU fault cleared; the canary decides")
		}
		if d.driver != "" && f.DriverVersion != d.driver {
			d.o.Log.Info("driver changed; applying the recipe again", "from", d.driver, "to", f.DriverVersion)
			d.driver = f.DriverVersion
			d.apply(ctx, "driver changed")
			return
		}
		d.driver = f.DriverVersion
	}
	if d.pending != nil && d.health == Healthy && !d.unchangedSincePending(ctx) {
		d.o.Log.Info("the recipe or the facts changed since the switch failed; applying again")
		d.apply(ctx, "the recipe or the facts changed after a failed switch")
		return
	}
	if d.health == ApplyFailed {
		// The last apply failed: try again rather than canary a half-made node, less and
		// less often while it keeps failing.
		if d.retryIn > 0 {
			d.retryIn--
			return
		}
		d.apply(ctx, "retry after failure")
		return
	}
	d.canary(ctx)
}

func (d *Loop) apply(ctx context.Context, why string) {
	rep, err := d.o.Apply(ctx)
	if ctx.Err() != nil {
		// Stopping: an apply cut short says nothing about the node.
		d.o.Log.Info("apply interrupted: the daemon is stopping", "why", why)
		return
	}
	d.m.observeApply(rep, err)
	switch {
	case errors.Is(err, exitcode.ErrReboot):
		d.o.Log.Error("apply refused", "why", why, "err", err)
		d.setHealth(RebootRequired, err.Error())
		d.m.setRebootRequired(true)
	case err != nil && d.restoredServes(err):
		// The switch failed and what served before came back and passed its gate again:
		// the node serves correct answers. The change stays pending; it is not retried
		// (each retry would stop the good server again) until its inputs change.
		inputs := ""
		if d.o.Inputs != nil {
			inputs, _ = d.o.Inputs(ctx)
		}
		d.pending = &pendingChange{inputs: inputs, why: err.Error()}
		d.applyFailures, d.retryIn = 0, 0
		d.failures, d.restarts = 0, 0
		d.l, d.fresh = ladder{}, false
		d.o.Log.Error("the switch failed; what served before serves again and passed the gate; the change is pending until the recipe or the facts change",
			"why", why, "err", err)
		d.setHealth(Healthy, "")
		d.m.setSwitchFailed(err.Error())
	case err != nil && d.workerUntouched(err):
		// A worker's switch refused before its candidate started (the head runs another
		// launch): its server serves in the group as it did. The change stays pending, not
		// retried until its inputs change; the worker follows the head when the head's
		// launch changes (followLaunch).
		inputs := ""
		if d.o.Inputs != nil {
			inputs, _ = d.o.Inputs(ctx)
		}
		d.pending = &pendingChange{inputs: inputs, why: err.Error()}
		d.applyFailures, d.retryIn = 0, 0
		d.o.Log.Error("the switch was refused before its candidate started; what served serves on as it was; the change is pending until the recipe or the facts change",
			"why", why, "err", err)
		d.setHealth(Healthy, "")
		d.m.setSwitchFailed(err.Error())
	case err != nil:
		d.applyFailures++
		wait := min(1<<min(d.applyFailures-1, 30), maxRetryChecks) // 1, 2, 4 ... checks
		d.retryIn = wait - 1
		d.o.Log.Error("apply failed", "why", why, "err", err,
			"retry_seconds", logval.Seconds(time.Duration(wait)*d.o.Interval))
		d.setHealth(ApplyFailed, "apply failed: "+err.Error())
	default:
		d.o.Log.Info("apply done", "why", why)
		d.failures, d.restarts, d.applyFailures, d.retryIn = 0, 0, 0, 0
		d.pending = nil
		d.m.setSwitchFailed("")
		d.l, d.fresh = ladder{}, false
		d.setHealth(Healthy, "")
		d.m.setReady()
		d.noteWhole(ctx)
	}
}

// restoredServes reports whether err is a switch that failed while what served before
// came back and passed the gate again.
func (d *Loop) restoredServes(err error) bool {
	var fe *switchover.FailedError
	return errors.As(err, &fe) && fe.Serving()
}

// workerUntouched reports whether err is a switch of a group's worker that failed
// without touching what serves (switchover.Result.Untouched).
func (d *Loop) workerUntouched(err error) bool {
	var fe *switchover.FailedError
	return d.o.Group != nil && !d.o.Group.IsHead() && errors.As(err, &fe) && fe.Result != nil && fe.Result.Untouched()
}

// unchangedSincePending reports whether a change whose switch failed is pending and the
// recipe and the facts are still those it was tried with.
func (d *Loop) unchangedSincePending(ctx context.Context) bool {
	if d.pending == nil {
		return false
	}
	if d.o.Inputs == nil {
		return true
	}
	now, err := d.o.Inputs(ctx)
	if err != nil {
		d.o.Log.Warn("reading the recipe and the facts", "err", err)
		return true
	}
	return now == d.pending.inputs
}

// maxRetryChecks is the most checks between two retries of a failing apply (about an
// hour at the default interval).
const maxRetryChecks = 64

// stop says the daemon stops, and leaves a final textfile that says so (health
// "stopped", daemon_up 0, the heartbeat of this moment): a file left behind is not read
// as a node still watched.
func (d *Loop) stop(ctx context.Context) {
	d.o.Log.Info("stopping", "cause", context.Cause(ctx))
	_ = d.o.Notify("STOPPING=1")
	// A hook still running was given ctx, which has ended: its process group is being
	// killed; nothing it started outlives the daemon.
	d.waitHooks()
	d.mu.Lock()
	d.health = Stopped
	d.mu.Unlock()
	d.o.Metrics.stopped()
	d.afterCheck()
}

func (d *Loop) detect(ctx context.Context) (*gpu.Facts, error) {
	if d.o.Detect == nil {
		return nil, nil
	}
	return d.o.Detect(ctx)
}

func (d *Loop) setHealth(h Health, reason string) {
	d.mu.Lock()
	d.health, d.reason = h, reason
	d.mu.Unlock()
	d.m.setHealth(h, reason)
}

func (d *Loop) status(s string) {
	_ = d.o.Notify(fmt.Sprintf("STATUS=%s", s))
}
