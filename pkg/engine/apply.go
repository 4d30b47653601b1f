package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/refusal"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// Report is what one apply did; it is written to runs/<time>/report.json.
type Report struct {
	Recipe     string        `json:"recipe"`
	RecipeFile string        `json:"recipe_file"`
	Started    time.Time     `json:"started"`
	Duration   time.Duration `json:"duration_ns"`
	Result     string        `json:"result"`
	ExitCode   int           `json:"exit_code"`
	Error      string        `json:"error,omitempty"`
	// Refusals are every way the host fell short of the recipe, with codes and facts, when
	// the run was refused (exit 4).
	Refusals     []refusal.Reason  `json:"refusals,omitempty"`
	FactsChanged []string          `json:"facts_changed,omitempty"`
	Facts        map[string]string `json:"facts,omitempty"`
	Steps        []*StepReport     `json:"steps"`
	// Dir is the run's folder (report and step logs).
	Dir string `json:"dir"`
	// Generation says which generation this run built and which one serves (nil when the
	// recipe uses none).
	Generation *GenerationReport `json:"generation,omitempty"`
}

// StepReport is one step's outcome in a run.
type StepReport struct {
	Name     string         `json:"name"`
	Kind     string         `json:"kind"`
	Result   string         `json:"result"`
	Reason   string         `json:"reason"`
	Started  time.Time      `json:"started,omitzero"`
	Duration time.Duration  `json:"duration_ns"`
	Error    string         `json:"error,omitempty"`
	Log      string         `json:"log,omitempty"`
	Details  map[string]any `json:"details,omitempty"`
	// FromCache is the digest of the fleet cache artifact the step's outputs came from
	// (its result is then "ok (from cache)" in the summary); Pushed the digest of the
	// artifact it published.
	FromCache string `json:"from_cache,omitempty"`
	Pushed    string `json:"pushed,omitempty"`
	// Gate is set in a run's own report when the step is a gate (Gate: the smoke step),
	// so that what reads the report in process (the daemon's metrics) need not know the
	// kind's name; it is not written to report.json.
	Gate bool `json:"-"`

	err error
}

// Err returns the step's error, with its exit-code marks.
func (s *StepReport) Err() error { return s.err }

// HubDetail is the detail a download step sets (to the repository) when its files come
// from the Hugging Face hub: only then does a network failure's hint name HF_ENDPOINT.
const HubDetail = "hf_repo"

// fromHub reports whether the step downloads from the hub (its HubDetail is set).
func (s *StepReport) fromHub() bool {
	v, ok := s.Details[HubDetail].(string)
	return ok && v != ""
}

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

	sem := make(chan struct{}, e.opts.Concurrency)
	var wg sync.WaitGroup
	for _, n := range e.nodes {
		n.res = &StepReport{Name: n.step.Name, Kind: n.step.Kind, Gate: isGate(n.impl)}
		wg.Add(1)
		go func(n *node) {
			defer wg.Done()
			defer close(n.done)
			e.runNode(ctx, n, sem, runDir)
		}(n)
	}
	wg.Wait()

	// A run in which nothing ran and no fact changed leaves the state as it was.
	var saveErr error
	e.mu.Lock()
	if e.ranAny || len(rep.FactsChanged) > 0 || len(e.state.Facts) == 0 && e.opts.Facts != nil {
		e.state.Facts = e.factsMap()
		saveErr = e.saveState()
	}
	e.mu.Unlock()

	var first error
	failed := &stepsFailed{}
	for _, n := range e.order() {
		rep.Steps = append(rep.Steps, n.res)
		n.res.Details = e.store.Details(n.step.Name)
		if n.res.err != nil {
			failed.names = append(failed.names, n.step.Name)
			failed.errs = append(failed.errs, n.res.err)
			failed.interrupted = append(failed.interrupted, n.res.Result == ResultInterrupted)
		}
	}
	if len(failed.errs) > 0 {
		first = failed
	}
	if first == nil && saveErr != nil {
		first = saveErr
	}
	if first == nil && ctx.Err() != nil {
		first = fmt.Errorf("interrupted: %w", ctx.Err())
	}
	if first == nil && len(e.opts.Only) == 0 {
		// The run passed: its server serves on the GPUs it sees (recorded for GPUConflicts).
		e.mu.Lock()
		e.served = true
		if err := e.saveState(); err != nil {
			first = err
		}
		e.mu.Unlock()
		if err := e.recordNodeClaim(); err != nil {
			e.log.Warn("the GPUs this recipe serves on are not recorded node-wide: runs from other state dirs will not see them", "err", err)
		}
		e.payUndrain(ctx)
	}
	rep.Generation = e.endGeneration(first == nil)
	if rep.Generation != nil {
		e.log.Info(rep.Generation.Note)
	}
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
	if err := writeReport(rep); err != nil && first == nil {
		first = err
	}
	return rep, first
}

func (e *Engine) runNode(ctx context.Context, n *node, sem chan struct{}, runDir string) {
	res := n.res
	// Needed steps always finish (a cancelled run cancels them too), so waiting for them
	// is safe, and their results are read only once they are final.
	for _, d := range n.needs {
		<-d.done
	}
	if len(e.opts.Only) > 0 && !contains(e.opts.Only, n.step.Name) {
		res.Result, res.Reason = ResultNotSelected, "not in --only"
		return
	}
	for _, d := range n.needs {
		switch d.res.Result {
		case ResultFailed, ResultBlocked, ResultInterrupted:
			res.Result, res.Reason = ResultBlocked, fmt.Sprintf("needs %s, which %s", d.step.Name, d.res.Result)
			return
		}
	}
	if ctx.Err() != nil {
		res.Result, res.Reason = ResultInterrupted, "run interrupted before it started"
		return
	}
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		res.Result, res.Reason = ResultInterrupted, "run interrupted before it started"
		return
	}
	defer func() { <-sem }()

	var ran []string
	for _, d := range n.needs {
		if d.res.Result == ResultOK && !converges(d) {
			ran = append(ran, d.step.Name)
		}
	}
	// The step log is opened only for a step that runs: a no-op re-run writes no logs.
	denv := e.env(n, nil, "")
	denv.DepsRan = ran
	var dec Decision
	err := e.guard(n, denv, runDir, "deciding whether to run", func() (err error) {
		dec, err = e.decide(ctx, n, denv)
		return err
	})
	if err != nil {
		res.Result, res.err, res.Error, res.Reason = ResultFailed, err, exitcode.Message(err), "cannot tell whether to run"
		if pe := (*PanicError)(nil); errors.As(err, &pe) {
			res.Log = pe.Log
		}
		e.log.Error("step failed", "step", n.step.Name, "err", err)
		return
	}
	res.Reason = dec.Reason
	if dec.Run && e.gen.readOnly(n.step.Name) {
		err := e.gen.writeRefusal(n.step.Name, dec.Reason)
		res.Result, res.err, res.Error = ResultFailed, err, exitcode.Message(err)
		e.log.Error("step refused", "step", n.step.Name, "err", err)
		return
	}
	if !dec.Run {
		res.Result = ResultSkipped
		e.log.Info("skipped", "step", n.step.Name, "reason", dec.Reason)
		e.publishOrDefer(ctx, n, denv, CacheSlot{Cache: e.opts.Cache, Tag: dec.Fingerprint}, res, false)
		return
	}
	logf, logPath, err := openStepLog(runDir, n.step.Name)
	if err != nil {
		res.Result, res.err = ResultFailed, err
		res.Error = exitcode.Message(err)
		return
	}
	defer logf.Close()
	env := e.env(n, logf, logPath)
	env.DepsRan = ran
	res.Log = logPath
	res.Started = e.opts.Now().UTC()
	// The artifact's tag is the fingerprint before the run: what a fresh node computes.
	slot := CacheSlot{Cache: e.opts.Cache, Tag: dec.Fingerprint}
	env.Log.Info("running", "reason", dec.Reason)
	e.record(n.step.Name, func(r *StepRecord) {
		r.Result, r.PID, r.Started, r.Reason, r.Error = ResultRunning, os.Getpid(), res.Started, dec.Reason, ""
	})
	runErr := e.guard(n, env, runDir, "running", func() error { return e.restoreOrRun(ctx, n, env, slot, res) })
	res.Duration = e.opts.Now().Sub(res.Started)
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
		if err := e.guard(n, env, runDir, "fingerprinting after the run", func() (err error) {
			parts, err = e.fingerprint(context.WithoutCancel(ctx), n, env)
			return err
		}); err == nil {
			dec.Parts, dec.Fingerprint = parts, fingerprintOf(parts)
		}
		env.Log.Info("done", "seconds", logval.Seconds(res.Duration))
		if a, ok := e.store.artifact(n.step.Name); ok && a.fromCache {
			res.FromCache = a.digest
		}
		e.publishOrDefer(ctx, n, env, slot, res, true)
		e.gatePassed(n, env)
	case ctx.Err() != nil:
		res.Result, res.err = ResultInterrupted, fmt.Errorf("interrupted: %w", runErr)
		env.Log.Warn("interrupted", "err", runErr)
	default:
		runErr = e.noSpaceHint(n.step.Name, runErr, logPath)
		res.Result, res.err = ResultFailed, runErr
		env.Log.Error("failed", "err", runErr, "log", logPath)
	}
	if res.err != nil {
		res.Error = exitcode.Message(res.err)
	}
	e.record(n.step.Name, func(r *StepRecord) {
		r.Result, r.PID, r.Duration, r.Error = res.Result, 0, res.Duration, res.Error
		if res.Result == ResultSkipped {
			r.Reason = res.Reason
		}
		if res.Result == ResultOK {
			r.Fingerprint, r.Parts = dec.Fingerprint, dec.Parts
			r.Artifact = ""
			if a, ok := e.store.artifact(n.step.Name); ok {
				r.Artifact = a.digest
			}
		}
	})
}

// restoreOrRun takes the step's outputs from the fleet cache when it can, and runs the
// step otherwise (a failed pull is said and falls back to running). A forced step runs.
func (e *Engine) restoreOrRun(ctx context.Context, n *node, env *Env, slot CacheSlot, res *StepReport) error {
	if why := offlineSkip(n, env); why != "" {
		// Under --root nothing runs on this host or writes outside the root.
		return Skipped(why)
	}
	if slot.Cache == nil {
		return n.impl.Run(ctx, env)
	}
	if r, ok := n.impl.(Restorer); ok && !env.Force {
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
	if cr, ok := n.impl.(CachedRunner); ok {
		return cr.RunCached(ctx, env, slot)
	}
	return n.impl.Run(ctx, env)
}

// publish pushes what a successful run made, when the step is a Publisher and this node
// pushes. A failed push is a warning: the step's own work succeeded. It is also called for
// a step that is up to date here but whose artifact the registry lacks (made before the
// cache was configured, or the registry was wiped): a pushing node seeds the cache.
func (e *Engine) publish(ctx context.Context, n *node, env *Env, slot CacheSlot, res *StepReport) {
	p, ok := n.impl.(Publisher)
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
		return
	}
	start := e.opts.Now()
	var digest string
	// What a registry's UI shows of the tag: which recipe and step made it, from which
	// SGLang commit (the recipe's sglang_commit var, when it has one).
	ann := map[string]string{cache.AnnotationRecipe: env.RecipeName, cache.AnnotationStep: n.step.Name}
	if e.opts.Recipe != nil {
		ann[cache.AnnotationSGLangCommit] = e.opts.Recipe.Vars["sglang_commit"]
	}
	ctx = cache.WithAnnotations(ctx, ann)
	err = e.guard(n, env, "", "publishing", func() (err error) {
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
	e.store.setArtifact(n.step.Name, digest, false)
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
		n := e.byName[name]
		for _, d := range n.step.Needs {
			if contains(e.opts.Only, d) {
				continue
			}
			if rec := e.state.Steps[d]; rec == nil || rec.Result != ResultOK {
				e.log.Warn("a needed step has not completed", "step", name, "needs", d)
			}
		}
	}
}

// KeepRuns is how many run folders (report and step logs) the state directory keeps.
const KeepRuns = 50

func (e *Engine) newRunDir(start time.Time) (string, error) {
	runs := filepath.Join(e.opts.StateDir, "runs")
	if err := safefile.NoSymlinks(e.opts.StateDir, "runs"); err != nil {
		return "", fmt.Errorf("%w: creating run folder: %v", exitcode.ErrUsage, err)
	}
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return "", fmt.Errorf("creating run folder: %w", err)
	}
	base := filepath.Join(runs, start.UTC().Format("20060102T150405.000Z"))
	dir := base
	for i := 1; ; i++ {
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			pruneRuns(runs, KeepRuns)
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) || i > 1000 {
			return "", fmt.Errorf("creating run folder: %w", err)
		}
		dir = fmt.Sprintf("%s-%d", base, i)
	}
}

// pruneRuns removes the oldest run folders beyond keep (names sort by time).
func pruneRuns(runs string, keep int) {
	entries, err := os.ReadDir(runs)
	if err != nil || len(entries) <= keep {
		return
	}
	for _, ent := range entries[:len(entries)-keep] {
		_ = os.RemoveAll(filepath.Join(runs, ent.Name()))
	}
}

func writeReport(rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding report: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(rep.Dir, "report.json"), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	return nil
}

// LatestReport reads the report of the newest run in the state directory.
func LatestReport(stateDir string) (*Report, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, "runs"))
	if err != nil {
		return nil, fmt.Errorf("reading runs: %w", err)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		b, err := safefile.ReadNoFollow(filepath.Join(stateDir, "runs", entries[i].Name(), "report.json"))
		if err != nil {
			continue
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("reading report: %w", err)
		}
		return &rep, nil
	}
	return nil, fmt.Errorf("no run has finished yet in %s", stateDir)
}

// Summary writes the apply summary table.
func (r *Report) Summary() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tRESULT\tDURATION\tREASON")
	for _, s := range r.Steps {
		dur := "-"
		if s.Duration > 0 {
			dur = s.Duration.Round(time.Millisecond).String()
		}
		reason := s.Reason
		if s.Error != "" {
			reason += ": " + Cause(s.Error)
		}
		result := s.Result
		if s.FromCache != "" && result == ResultOK {
			result += " (from cache)"
			reason += "; artifact " + s.FromCache
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, result, dur, reason)
	}
	w.Flush()
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Hints says what to do about the failures that have a known fix (the network: a proxy,
// a hub mirror, the fleet cache), one line per failed step that has one.
func (r *Report) Hints() []string {
	var out []string
	for _, s := range r.Steps {
		if s.Result != ResultFailed {
			continue
		}
		if h := NetworkHint(s.Kind, s.Error, s.fromHub()); h != "" {
			out = append(out, "fix for "+s.Name+": "+h)
		}
	}
	return out
}

// Failures describes each failed step in full: its error with every line, the path of its
// log and, when the error is one line, the last tail lines of that log, and the fix when
// one is known (Hints). Empty when no step failed.
func (r *Report) Failures(tail int) string {
	var b strings.Builder
	for _, s := range r.Steps {
		if s.Result != ResultFailed {
			continue
		}
		msg := s.Error
		if msg == "" {
			msg = s.Reason
		}
		lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
		fmt.Fprintf(&b, "%s failed: %s\n", s.Name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "  %s\n", l)
		}
		if h := NetworkHint(s.Kind, msg, s.fromHub()); h != "" {
			fmt.Fprintf(&b, "  fix: %s\n", h)
		}
		if s.Log == "" {
			continue
		}
		if !strings.Contains(msg, s.Log) {
			fmt.Fprintf(&b, "  log: %s\n", s.Log)
		}
		if len(lines) > 1 || tail <= 0 {
			continue
		}
		if last := lastLines(s.Log, tail); len(last) > 0 {
			fmt.Fprintf(&b, "  last %d lines of the log:\n", len(last))
			for _, l := range last {
				fmt.Fprintf(&b, "    %s\n", l)
			}
		}
	}
	return b.String()
}

// lastLines returns up to n last non-empty lines of the file at path (its last 64 KiB).
func lastLines(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	const window = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		_, _ = f.Seek(fi.Size()-window, 0)
	}
	b, _ := io.ReadAll(io.LimitReader(f, window))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimRight(l, "\r "); l != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

func openStepLog(dir, step string) (*os.File, string, error) {
	path := filepath.Join(dir, step+".log")
	f, err := safefile.OpenNoFollow(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("opening step log: %w", err)
	}
	return f, path, nil
}
