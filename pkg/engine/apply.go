package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/logval"
)

// Apply runs the recipe: each step once its needs are done, independent steps at the same
// time, skipping what is unchanged and intact. It records the state after every step and
// writes the run's report. The error is the first step failure (with its exit-code mark).
func (e *Engine) Apply(ctx context.Context) (*Report, error) {
	// A server that would share GPUs with another recipe's is refused before anything runs;
	// the check and this run's pending claim are one step under the node's claims lock.
	if err := e.claimPending(); err != nil {
		return nil, err
	}
	defer e.releasePending()
	if !e.opts.IgnoreState {
		// Before any record is written: remove and gc in other state dirs see this one.
		if err := RegisterStateDir(e.opts.StateDirsDir, e.opts.StateDir); err != nil {
			e.log.Warn("the state dir cannot be registered node-wide: remove and gc from other state dirs will not see what this one's recipes use", "err", err)
		}
	}
	start := e.opts.Now()
	rep, err := e.startRun(start)
	if err != nil {
		return nil, err
	}
	e.runVertices(ctx, rep.Dir)
	saveErr := e.saveFacts(rep)
	first := e.collect(rep)
	if first == nil && saveErr != nil {
		first = saveErr
	}
	if first == nil && ctx.Err() != nil {
		first = fmt.Errorf("interrupted: %w", ctx.Err())
	}
	if first == nil && len(e.opts.Only) == 0 {
		first = e.pass(ctx)
	}
	rep.Generation = e.endGeneration(first == nil)
	if rep.Generation != nil {
		e.log.Info(rep.Generation.Note)
	}
	e.conclude(ctx, rep, start, first)
	if err := writeReport(rep); err != nil && first == nil {
		first = err
	}
	return rep, first
}

// startRun makes the run's report and folder, says what the log will show (offline, the
// facts that changed, the needs --only leaves out) and begins the run's generation.
func (e *Engine) startRun(start time.Time) (*Report, error) {
	rep := &Report{Recipe: e.opts.Recipe.Name, RecipeFile: e.opts.Recipe.File, Started: start.UTC(), FactsChanged: e.FactsChanged(), Facts: e.factsMap()}
	runDir, err := e.newRunDir(start)
	if err != nil {
		return nil, err
	}
	rep.Dir = runDir
	if root := e.opts.Root; root != "" && root != "/" {
		// One convention for the whole log: the node's paths, as the recipe names them.
		e.log.Info("offline: every host path is written under the root; paths below are the node's", "root", root)
	}
	for _, c := range rep.FactsChanged {
		e.log.Info("host fact changed", "fact", c)
	}
	if len(e.opts.Only) > 0 {
		e.warnUnmetNeeds()
	}
	if err := e.beginGeneration(); err != nil {
		return nil, err
	}
	return rep, nil
}

// runVertices runs every vertex in its own goroutine, each once its needs are done, at most
// Concurrency steps at once, and waits for all of them.
func (e *Engine) runVertices(ctx context.Context, runDir string) {
	sem := make(chan struct{}, e.opts.Concurrency)
	var wg sync.WaitGroup
	for _, v := range e.vertices {
		v.res = &StepReport{Name: v.step.Name, Kind: v.step.Kind, Gate: isGate(v.impl)}
		wg.Add(1)
		go func(v *vertex) {
			defer wg.Done()
			defer close(v.done)
			e.runVertex(ctx, v, sem, runDir)
		}(v)
	}
	wg.Wait()
}

// saveFacts records the host facts with the state; a run in which nothing ran and no fact
// changed leaves the state as it was.
func (e *Engine) saveFacts(rep *Report) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ranAny || len(rep.FactsChanged) > 0 || len(e.state.Facts) == 0 && e.opts.Facts != nil {
		e.state.Facts = e.factsMap()
		return e.saveState()
	}
	return nil
}

// collect puts the steps' outcomes in the report, in the run's order, and returns the
// failures (nil when none failed).
func (e *Engine) collect(rep *Report) error {
	failed := &stepsFailed{}
	for _, v := range e.order() {
		rep.Steps = append(rep.Steps, v.res)
		v.res.Details = e.store.Details(v.step.Name)
		if v.res.err != nil {
			failed.names = append(failed.names, v.step.Name)
			failed.errs = append(failed.errs, v.res.err)
			failed.interrupted = append(failed.interrupted, v.res.Result == ResultInterrupted)
		}
	}
	if len(failed.errs) > 0 {
		return failed
	}
	return nil
}

// pass records that the run passed: its server serves on the GPUs it sees (recorded for
// GPUConflicts, here and node-wide), and an undrain the node is owed is paid.
func (e *Engine) pass(ctx context.Context) error {
	e.mu.Lock()
	e.served = true
	err := e.saveState()
	e.mu.Unlock()
	if err := e.recordNodeClaim(); err != nil {
		e.log.Warn("the GPUs this recipe serves on are not recorded node-wide: runs from other state dirs will not see them", "err", err)
	}
	e.payUndrain(ctx)
	return err
}

// conclude sets the report's duration, result and exit code from the run's error first.
func (e *Engine) conclude(ctx context.Context, rep *Report, start time.Time, first error) {
	rep.Duration = e.opts.Now().Sub(start)
	rep.ExitCode = exitcode.Of(first)
	if first != nil && errors.Is(context.Cause(ctx), exitcode.ErrInterrupted) {
		// Ctrl-C: the code the shell sees, whatever the step made of its cancellation.
		rep.ExitCode = exitcode.ExitInterrupted
	}
	rep.Result = "ok"
	if first != nil {
		rep.Result = "failed"
		rep.Error = first.Error()
		if ctx.Err() != nil {
			rep.Result = ResultInterrupted
		}
	}
}

// runVertex runs the step of v once its needs are done: it is left out, blocked or
// interrupted first when it must be, skipped when it need not run, else run with a log of
// its own, and its outcome recorded.
func (e *Engine) runVertex(ctx context.Context, v *vertex, sem chan struct{}, runDir string) {
	// Needed steps always finish (a cancelled run cancels them too), so waiting for them
	// is safe, and their results are read only once they are final.
	for _, d := range v.needs {
		<-d.done
	}
	if !e.mayStart(ctx, v) {
		return
	}
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		v.res.Result, v.res.Reason = ResultInterrupted, "run interrupted before it started"
		return
	}
	defer func() { <-sem }()

	var ran []string
	for _, d := range v.needs {
		if d.res.Result == ResultOK && !converges(d) {
			ran = append(ran, d.step.Name)
		}
	}
	// The step log is opened only for a step that runs: a no-op re-run writes no logs.
	denv := e.env(v, nil, "")
	denv.DepsRan = ran
	dec, ok := e.decideVertex(ctx, v, denv, runDir)
	if !ok {
		return
	}
	if !dec.Run {
		v.res.Result = ResultSkipped
		e.log.Info("skipped", "step", v.step.Name, "reason", dec.Reason)
		e.publishOrDefer(ctx, v, denv, CacheSlot{Cache: e.opts.Cache, Tag: dec.Fingerprint, parts: dec.Parts}, v.res)
		return
	}
	e.runStep(ctx, v, runDir, ran, dec)
}

// mayStart reports whether the step of v may start once its needs are done; when it may
// not (not selected, a need failed, the run interrupted) its outcome says why.
func (e *Engine) mayStart(ctx context.Context, v *vertex) bool {
	res := v.res
	if len(e.opts.Only) > 0 && !contains(e.opts.Only, v.step.Name) {
		res.Result, res.Reason = ResultNotSelected, "not in --only"
		return false
	}
	for _, d := range v.needs {
		switch d.res.Result {
		case ResultFailed, ResultBlocked, ResultInterrupted:
			res.Result, res.Reason = ResultBlocked, fmt.Sprintf("needs %s, which %s", d.step.Name, d.res.Result)
			return false
		}
	}
	if ctx.Err() != nil {
		res.Result, res.Reason = ResultInterrupted, "run interrupted before it started"
		return false
	}
	return true
}

// decideVertex decides whether the step of v runs (decide); ok is false when it cannot tell,
// or when it would write into a generation that has served, and its outcome says so.
func (e *Engine) decideVertex(ctx context.Context, v *vertex, denv *Env, runDir string) (dec Decision, ok bool) {
	res := v.res
	err := e.guard(v, denv, runDir, "deciding whether to run", func() (err error) {
		dec, err = e.decide(ctx, v, denv)
		return err
	})
	if err != nil {
		res.Result, res.err, res.Error, res.Reason = ResultFailed, err, exitcode.Message(err), "cannot tell whether to run"
		if pe := (*PanicError)(nil); errors.As(err, &pe) {
			res.Log = pe.Log
		}
		e.log.Error("step failed", "step", v.step.Name, "err", err)
		return dec, false
	}
	res.Reason = dec.Reason
	if dec.Run && e.gen.readOnly(v.step.Name) {
		err := e.gen.writeRefusal(v.step.Name, dec.Reason)
		res.Result, res.err, res.Error = ResultFailed, err, exitcode.Message(err)
		e.log.Error("step refused", "step", v.step.Name, "err", err)
		return dec, false
	}
	return dec, true
}

// runStep runs the step of v (dec says why) with its own log in runDir, the steps it needs
// that ran named in ran, and records what came of it.
func (e *Engine) runStep(ctx context.Context, v *vertex, runDir string, ran []string, dec Decision) {
	res := v.res
	logf, logPath, err := openStepLog(runDir, v.step.Name)
	if err != nil {
		res.Result, res.err = ResultFailed, err
		res.Error = exitcode.Message(err)
		return
	}
	defer logf.Close()
	env := e.env(v, logf, logPath)
	env.DepsRan = ran
	res.Log = logPath
	res.Started = e.opts.Now().UTC()
	// The artifact's tag is the fingerprint before the run: what a fresh node computes.
	slot := CacheSlot{Cache: e.opts.Cache, Tag: dec.Fingerprint}
	env.Log.Info("running", "reason", dec.Reason)
	e.record(v.step.Name, func(r *StepRecord) {
		r.Result, r.PID, r.Started, r.Reason, r.Error = ResultRunning, os.Getpid(), res.Started, dec.Reason, ""
	})
	runErr := e.guard(v, env, runDir, "running", func() error { return e.restoreOrRun(ctx, v, env, slot, res) })
	res.Duration = e.opts.Now().Sub(res.Started)
	e.settle(ctx, v, env, runDir, slot, &dec, runErr)
	if res.err != nil {
		res.Error = exitcode.Message(res.err)
	}
	e.recordOutcome(v, dec)
}

// settle sets the outcome of the step of v from its run's error runErr: skipped by its own
// choice, done (its inputs fingerprinted again into dec, what it made published),
// interrupted, or failed.
func (e *Engine) settle(ctx context.Context, v *vertex, env *Env, runDir string, slot CacheSlot, dec *Decision, runErr error) {
	res := v.res
	var skip *SkipError
	switch {
	case errors.As(runErr, &skip):
		// The step chose not to do its work: it is skipped, with its reason, and its
		// fingerprint is not recorded (it did not produce what it stands for).
		res.Result, res.Reason = ResultSkipped, skip.Reason
		env.Log.Info("skipped", "reason", skip.Reason)
	case runErr == nil:
		res.Result = ResultOK
		// Outputs may have changed what the step fingerprints (a tree it patched):
		// record the inputs as they are now.
		var parts map[string]string
		if err := e.guard(v, env, runDir, "fingerprinting after the run", func() (err error) {
			parts, err = e.fingerprint(context.WithoutCancel(ctx), v, env)
			return err
		}); err == nil {
			dec.Parts, dec.Fingerprint = parts, fingerprintOf(parts)
		}
		env.Log.Info("done", "seconds", logval.Seconds(res.Duration))
		if a, ok := e.store.artifact(v.step.Name); ok && a.fromCache {
			res.FromCache = a.digest
		}
		slot.parts = dec.Parts
		e.publishOrDefer(ctx, v, env, slot, res)
		e.gatePassed(v, env)
	case ctx.Err() != nil:
		res.Result, res.err = ResultInterrupted, fmt.Errorf("interrupted: %w", runErr)
		env.Log.Warn("interrupted", "err", runErr)
	default:
		runErr = e.noSpaceHint(v.step.Name, runErr, env.LogPath)
		res.Result, res.err = ResultFailed, runErr
		env.Log.Error("failed", "err", runErr, "log", env.LogPath)
	}
}

// recordOutcome records the outcome of the step of v: a step that passed with its
// fingerprint (dec) and the artifact it came from or made.
func (e *Engine) recordOutcome(v *vertex, dec Decision) {
	res := v.res
	e.record(v.step.Name, func(r *StepRecord) {
		r.Result, r.PID, r.Duration, r.Error = res.Result, 0, res.Duration, res.Error
		if res.Result == ResultSkipped {
			r.Reason = res.Reason
		}
		if res.Result == ResultOK {
			r.Fingerprint, r.Parts = dec.Fingerprint, dec.Parts
			r.Artifact = ""
			if a, ok := e.store.artifact(v.step.Name); ok {
				r.Artifact = a.digest
			}
		}
	})
}

// restoreOrRun takes the step's outputs from the fleet cache when it can, and runs the
// step otherwise (a failed pull is said and falls back to running). A forced step runs.
func (e *Engine) restoreOrRun(ctx context.Context, v *vertex, env *Env, slot CacheSlot, res *StepReport) error {
	if why := offlineSkip(v, env); why != "" {
		// Under --root nothing runs on this host or writes outside the root.
		return Skipped(why)
	}
	if slot.Cache == nil {
		return v.impl.Run(ctx, env)
	}
	if r, ok := v.impl.(Restorer); ok && !env.Force {
		digest, found, err := r.Restore(ctx, env, slot)
		switch {
		case err != nil && ctx.Err() != nil:
			return err
		case err != nil:
			env.Log.Warn("cannot take the outputs from the cache; running the step", "cache", slot.Cache.String(), "err", err)
			res.Reason += "; cache pull failed, ran instead: " + firstLine(err.Error())
			env.Detail("cache_error", err.Error())
		case found:
			env.FromCache(digest)
			res.FromCache = digest
			env.Log.Info("outputs taken from the cache", "artifact", digest, "cache", slot.Cache.String())
			return nil
		}
	}
	if cr, ok := v.impl.(CachedRunner); ok {
		return cr.RunCached(ctx, env, slot)
	}
	return v.impl.Run(ctx, env)
}

// publish pushes what a successful run made, when the step is a Publisher and this node
// pushes. A failed push is a warning: the step's own work succeeded. It is also called for
// a step that is up to date here but whose artifact the registry lacks (made before the
// cache was configured, or the registry was wiped): a pushing node seeds the cache.
func (e *Engine) publish(ctx context.Context, v *vertex, env *Env, slot CacheSlot, res *StepReport) {
	p, ok := v.impl.(Publisher)
	if !ok || slot.Cache == nil || slot.Tag == "" || !slot.Cache.CanPush() || res.FromCache != "" {
		return
	}
	// A tag is never pushed twice: a build that is not bit-for-bit reproducible must not
	// replace what other nodes may have taken already. A tag that cannot be read (an
	// artifact outside cache.digests, a registry error) may exist: it is not pushed over.
	a, err := slot.Cache.Lookup(ctx, slot.Tag)
	switch {
	case err != nil:
		env.Log.Warn("cannot tell whether the cache holds this step's artifact; not pushing", "cache", slot.Cache.String(), "err", err)
		env.Detail("cache_push_error", "not pushed: "+err.Error())
		return
	case a != nil:
		env.Log.Debug("the cache already holds this step's artifact; not pushing", "artifact", a.Digest)
		e.tagPinned(ctx, v, env, slot, a.Digest)
		return
	}
	start := e.opts.Now()
	var digest string
	// What a registry's UI shows of the tag: which recipe and step made it, from which
	// SGLang commit (the recipe's sglang_commit var, when it has one).
	ann := map[string]string{cache.AnnotationRecipe: env.RecipeName, cache.AnnotationStep: v.step.Name}
	if e.opts.Recipe != nil {
		ann[cache.AnnotationSGLangCommit] = e.opts.Recipe.Vars["sglang_commit"]
	}
	ctx = cache.WithAnnotations(ctx, ann)
	err = e.guard(v, env, "", "publishing", func() (err error) {
		digest, err = p.Publish(ctx, env, slot)
		return err
	})
	if err != nil {
		env.Log.Warn("pushing to the cache failed", "cache", slot.Cache.String(), "err", err)
		env.Detail("cache_push_error", err.Error())
		return
	}
	if digest == "" {
		return
	}
	e.store.setArtifact(v.step.Name, digest, false)
	e.tagPinned(ctx, v, env, slot, digest)
	res.Pushed = digest
	env.Detail("cache_pushed", digest)
	env.Log.Info("pushed to the cache", "artifact", digest, "tag", shortDigest(slot.Tag), "seconds", logval.Seconds(e.opts.Now().Sub(start)))
}

// record updates one step's record and writes the state.
func (e *Engine) record(name string, f func(*StepRecord)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ranAny = true
	rec := e.state.Steps[name]
	if rec == nil {
		rec = &StepRecord{}
		e.state.Steps[name] = rec
	}
	f(rec)
	if err := e.saveState(); err != nil {
		e.log.Error("recording state", "err", err)
	}
}

func (e *Engine) warnUnmetNeeds() {
	for _, name := range e.opts.Only {
		v := e.byName[name]
		for _, d := range v.step.Needs {
			if contains(e.opts.Only, d) {
				continue
			}
			if rec := e.state.Steps[d]; rec == nil || rec.Result != ResultOK {
				e.log.Warn("a needed step has not completed", "step", name, "needs", d)
			}
		}
	}
}
