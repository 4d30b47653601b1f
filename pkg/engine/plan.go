package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/refusal"
)

// Decision is whether a step runs and why.
type Decision struct {
	Run    bool
	Reason string
	// Fingerprint and Parts are the step's current inputs (digests).
	Fingerprint string
	Parts       map[string]string
}

// decide computes a step's fingerprint and compares it and its outputs with the state.
func (e *Engine) decide(ctx context.Context, v *vertex, env *Env) (Decision, error) {
	parts, err := e.fingerprint(ctx, v, env)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Parts: parts, Fingerprint: fingerprintOf(parts)}
	rec := e.currentRecord(v.step.Name)
	if ar, ok := v.impl.(AlwaysRunner); ok && ar.AlwaysRun() {
		d.Run, d.Reason = true, "always runs"
		return d, nil
	}
	switch {
	case env.Force:
		d.Run, d.Reason = true, "forced"
		return d, nil
	case rec == nil:
		d.Run, d.Reason = true, "new"
		return d, nil
	case rec.Result == ResultRunning && e.opts.ApplyRunning != 0:
		d.Run, d.Reason = true, "running now in the apply that holds the lock"
		if e.opts.ApplyRunning > 0 {
			d.Reason = fmt.Sprintf("running now (an apply is running, pid %d)", e.opts.ApplyRunning)
		}
		return d, nil
	case rec.Result == ResultRunning:
		d.Run, d.Reason = true, "interrupted in an earlier run"
		return d, nil
	case rec.Result != ResultOK:
		d.Run, d.Reason = true, "last run "+rec.Result
		return d, nil
	case len(env.DepsRan) > 0:
		// What a needed step made is this step's input: a rebuilt kernel is reinstalled,
		// a reinstalled server restarted.
		d.Run, d.Reason = true, "needs "+strings.Join(env.DepsRan, ", ")+", which ran"
		return d, nil
	}
	if changed := e.gen.withoutGenerationOnly(ChangedParts(rec.Parts, parts), rec.Parts, e.data.Lookup); len(changed) > 0 {
		d.Run, d.Reason = true, "fingerprint changed: "+strings.Join(e.gen.explainChanged(changed), ", ")
		return d, nil
	}
	ok, why, err := v.impl.Intact(ctx, env)
	if err != nil {
		return Decision{}, fmt.Errorf("checking outputs: %w", err)
	}
	if !ok {
		if why == "" {
			why = "outputs changed"
		}
		d.Run, d.Reason = true, why
		return d, nil
	}
	d.Reason = "unchanged"
	return d, nil
}

// fingerprint returns the digests of a step's named inputs: its recipe text, the vars and
// facts that text uses, and the step's own inputs.
func (e *Engine) fingerprint(ctx context.Context, v *vertex, env *Env) (map[string]string, error) {
	st := v.step
	if nl, ok := v.impl.(NodeLocal); ok {
		st = st.Without(nl.NodeLocalFields()...)
	}
	parts := map[string]string{"spec": digest(st.BodyText())}
	for _, ref := range e.opts.Recipe.ExpandRefs(st) {
		parts[ref] = digest(e.data.Lookup(ref))
	}
	own, err := v.impl.Fingerprint(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("computing fingerprint: %w", err)
	}
	for k, val := range own {
		parts[k] = digest(val)
	}
	return parts, nil
}

// currentRecord returns a copy of a step's record as it stands (nil when there is none); other
// steps' goroutines update records under e.mu while this one decides.
func (e *Engine) currentRecord(name string) *StepRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.state.Steps[name]
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// ChangedParts returns, sorted, the names of the fingerprint parts that differ between old
// and cur (changed, added or gone): what plan names after "fingerprint changed:".
func ChangedParts(old, cur map[string]string) []string {
	var out []string
	for k, v := range cur {
		if old[k] != v {
			out = append(out, k)
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:12])
}

func fingerprintOf(parts map[string]string) string {
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, parts[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PlannedStep is one line of a plan.
type PlannedStep struct {
	Name   string   `json:"name"`
	Kind   string   `json:"kind"`
	Needs  []string `json:"needs,omitempty"`
	Run    bool     `json:"run"`
	Reason string   `json:"reason"`
	// Fingerprint is empty when it could not be computed before the step's needs ran.
	Fingerprint string `json:"fingerprint,omitempty"`
	Error       string `json:"error,omitempty"`
	// Details are the step's own description (the service's command line).
	Details []string `json:"details,omitempty"`
	// FromCache is the digest of the fleet cache's artifact that apply would take
	// instead of running the step; CacheNote says why it would not, when it cannot.
	FromCache string `json:"from_cache,omitempty"`
	CacheNote string `json:"cache_note,omitempty"`
}

// Plan is what apply would do.
type Plan struct {
	Recipe       string        `json:"recipe"`
	FactsChanged []string      `json:"facts_changed,omitempty"`
	Steps        []PlannedStep `json:"steps"`
	// Commands are the recipe's required commands as the host has them (the command
	// line fills them in).
	Commands []hostcmd.Result `json:"commands,omitempty"`
	// Generation says which generation apply would build into or go back to, and which
	// one serves (nil when the recipe uses none).
	Generation *PlanGeneration `json:"generation,omitempty"`
	// ApplyRunning is the pid of an apply running now (-1 when its pid is unknown).
	ApplyRunning int `json:"apply_running_pid,omitempty"`
	// ExitCode is plan's own exit code (4 when the host falls short, 6 when it needs a
	// reboot, 2 for bad input); Refusals are every way the host falls short, each with its
	// code and the facts it names (exit 4).
	ExitCode int              `json:"exit_code"`
	Refusals []refusal.Reason `json:"refusals,omitempty"`
}

// Plan generation states (PlanGeneration.State).
const (
	// GenServing: the generation serves already; apply builds no other.
	GenServing = "serving"
	// GenKept: a kept generation that passed its gate; apply goes back to it with its
	// kept step records, building nothing again.
	GenKept = "kept"
	// GenNew: apply builds a new generation.
	GenNew = "new"
)

// PlanGeneration is the generation a plan's apply would build into or go back to.
type PlanGeneration struct {
	// Key is the generation's key; Dir its folder (the node's path).
	Key string `json:"key"`
	Dir string `json:"dir"`
	// State is "serving", "kept" (passed before, kept: apply goes back to it) or "new".
	State string `json:"state"`
	// Passed is when a kept generation last passed its gate.
	Passed *time.Time `json:"passed,omitempty"`
	// Serving is the generation that serves now ("" when none does); InPlaceServes is set
	// when the tree built in place before generations serves again after a roll back.
	Serving       string `json:"serving,omitempty"`
	InPlaceServes bool   `json:"in_place_serves,omitempty"`
	// Changed names the inputs of the key that differ from the serving generation's.
	Changed []string `json:"changed,omitempty"`
}

// String is plan's line about the generation.
func (g *PlanGeneration) String() string {
	serves := "none serves yet"
	switch {
	case g.Serving != "":
		serves = g.Serving + " serves"
	case g.InPlaceServes:
		serves = "the in-place tree moved aside serves, after a roll back"
	}
	switch g.State {
	case GenServing:
		return fmt.Sprintf("%s (serving), in %s", g.Key, g.Dir)
	case GenKept:
		passed := ""
		if g.Passed != nil {
			passed = " " + g.Passed.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("%s (kept, passed%s: apply goes back to it, building nothing again; %s), in %s", g.Key, passed, serves, g.Dir)
	}
	return fmt.Sprintf("%s (new; %s), in %s", g.Key, serves, g.Dir)
}

// planGeneration is plan's generation.
func (e *Engine) planGeneration() *PlanGeneration {
	g := e.gen
	if g == nil {
		return nil
	}
	pg := &PlanGeneration{Key: g.info.Key, Dir: g.info.Dir, State: GenNew, Serving: g.info.Serving, InPlaceServes: g.info.InPlaceServes, Changed: g.changed}
	switch {
	case g.info.Serving == g.info.Key:
		pg.State, pg.Changed = GenServing, nil
	case g.kept():
		pg.State = GenKept
		if t := g.passedAt(); !t.IsZero() {
			pg.Passed = &t
		}
	}
	return pg
}

// ReadFiles reads the files the steps name (see FileReader) and returns the bad input
// among the failures (exitcode.ErrUsage), joined, each with its step; a file that is not there (an
// earlier step may make it) is left to plan and apply.
func (e *Engine) ReadFiles() error {
	var errs []error
	for _, v := range e.order() {
		fr, ok := v.impl.(FileReader)
		if !ok {
			continue
		}
		if err := fr.ReadFiles(e.env(v, nil, "")); errors.Is(err, exitcode.ErrUsage) {
			errs = append(errs, stepError(v, err))
		}
	}
	return errors.Join(errs...)
}

// Check is validate's look at every step without the host: the files the steps name (see
// ReadFiles) and what each Checker refuses from the recipe text alone. It returns the bad
// input (exitcode.ErrUsage), joined, each with its step.
func (e *Engine) Check() error {
	errs := []error{e.ReadFiles()}
	for _, v := range e.order() {
		c, ok := v.impl.(Checker)
		if !ok {
			continue
		}
		if err := c.Check(e.env(v, nil, "")); err != nil {
			errs = append(errs, stepError(v, err))
		}
	}
	return errors.Join(errs...)
}

// Plan says, step by step, what Apply would do and why. It changes nothing. A step whose
// needs will run is shown as running: its inputs are only known after they ran. The
// error joins the preflight failures of the steps (see Preflighter) and the bad input
// (exitcode.ErrUsage) that kept a step from telling; the plan is complete even then.
func (e *Engine) Plan(ctx context.Context) (*Plan, error) {
	p := &Plan{Recipe: e.opts.Recipe.Name, FactsChanged: e.FactsChanged(), Generation: e.planGeneration()}
	pl := &planner{e: e, runs: map[string]bool{}, planned: map[string]map[string]string{}}
	for _, v := range e.order() {
		p.Steps = append(p.Steps, pl.step(ctx, v))
	}
	pl.problems = append(pl.problems, sharedDiskProblems(pl.needs)...)
	if err := e.GPUConflicts(); err != nil {
		pl.problems = append(pl.problems, err)
	}
	if ctx.Err() != nil {
		// Cut short (Ctrl-C): the reasons above may be the cancellation's, not the steps'.
		pl.problems = append(pl.problems, fmt.Errorf("plan interrupted: %w", context.Cause(ctx)))
	}
	return p, errors.Join(pl.problems...)
}

// planner is one plan in the making: what it found wrong so far, the disk needs of the
// steps, and which steps run (their dependents run after them).
type planner struct {
	e        *Engine
	problems []error
	needs    []stepNeed
	runs     map[string]bool
	// planned holds each decided step's fingerprint parts, for the pinned keys of the
	// steps that need it.
	planned map[string]map[string]string
}

// step plans the step of v: whether it runs and why, from the cache or not, and what its
// preflight says.
func (pl *planner) step(ctx context.Context, v *vertex) PlannedStep {
	e := pl.e
	ps := PlannedStep{Name: v.step.Name, Kind: v.step.Kind, Needs: v.step.Needs}
	if len(e.opts.Only) > 0 && !contains(e.opts.Only, v.step.Name) {
		ps.Reason = ResultNotSelected
		return ps
	}
	var upstream []string
	for _, d := range v.step.Needs {
		if pl.runs[d] {
			upstream = append(upstream, d)
		}
	}
	env := e.env(v, nil, "")
	if ds, ok := v.impl.(Describer); ok {
		if err := e.guard(v, env, "", "describing", func() error { ps.Details = ds.Describe(env); return nil }); err != nil {
			ps.Details = nil
		}
	}
	var d Decision
	// A step that panics while planning is a plan error for that step, never a dead plan.
	err := e.guard(v, env, "", "planning", func() (err error) { d, err = e.decide(ctx, v, env); return err })
	var looked *lookup
	if err != nil {
		pl.undecided(v, env, &ps, err, upstream)
	} else {
		pl.checkFiles(v, env, &ps)
		looked = pl.decided(ctx, v, env, &ps, d, upstream)
	}
	if why := offlineSkip(v, env); why != "" {
		ps.Run, ps.Reason = false, why
	}
	env.Planned, env.PlannedDeps = ps.Run, upstream
	pl.preflight(ctx, v, env, &ps, looked)
	pl.runs[v.step.Name] = ps.Run && !converges(v)
	return ps
}

// undecided plans a step that cannot tell whether it runs (err): it runs, as its needs do
// or for the reason err gives; bad input (exitcode.ErrUsage) that apply would refuse (a FIFO
// as a patch, a branch where a commit is pinned) fails the plan too, with exit 2, after the
// table says why.
func (pl *planner) undecided(v *vertex, env *Env, ps *PlannedStep, err error, upstream []string) {
	if len(upstream) == 0 {
		ps.Error = exitcode.Message(err)
		ps.Run, ps.Reason = true, "cannot tell: "+exitcode.Message(err)
		if errors.Is(err, exitcode.ErrUsage) {
			pl.problems = append(pl.problems, fmt.Errorf("step %s: %w", v.step.Name, err))
		}
	} else {
		ps.Run, ps.Reason = true, "needs "+strings.Join(upstream, ", ")+", which runs"
	}
	if !errors.Is(err, exitcode.ErrUsage) {
		pl.checkFiles(v, env, ps)
	}
}

// checkFiles checks the files the step reads (a series and its patches, a questions file, a
// token file) as validate checks them: bad or missing ones fail the plan.
func (pl *planner) checkFiles(v *vertex, env *Env, ps *PlannedStep) {
	if fr, ok := v.impl.(FileReader); ok {
		if ferr := fr.ReadFiles(env); errors.Is(ferr, exitcode.ErrUsage) {
			ps.Error = exitcode.Message(ferr)
			pl.problems = append(pl.problems, fmt.Errorf("step %s: %w", v.step.Name, ferr))
		}
	}
}

// decided plans a step whose decision is d: it runs as d says, or because a step it needs
// (upstream) runs; a step that runs is looked up in the fleet cache, whose answer it
// returns (nil when it asked none).
func (pl *planner) decided(ctx context.Context, v *vertex, env *Env, ps *PlannedStep, d Decision, upstream []string) *lookup {
	pl.planned[v.step.Name] = d.Parts
	ps.Run, ps.Reason, ps.Fingerprint = d.Run, d.Reason, d.Fingerprint
	if !d.Run && len(upstream) > 0 {
		ps.Run, ps.Reason = true, "needs "+strings.Join(upstream, ", ")+", which runs"
	}
	if !ps.Run || env.Force {
		return nil
	}
	looked := pl.e.planCache(ctx, v, d.Fingerprint)
	ps.FromCache, ps.CacheNote = looked.noted()
	pinned := ""
	if looked != nil && ps.FromCache == "" && looked.err == nil && len(upstream) > 0 {
		// Its needs have not made its tree yet: the artifact may be there under the key
		// of what they are pinned to. Else the registry answered, but this step's key
		// includes what its needs make: apply asks again, with the key they leave, once
		// they ran.
		if pinnedLook := pl.e.planPinned(ctx, v, d.Parts, pl.planned); pinnedLook != nil {
			looked, ps.FromCache, pinned = pinnedLook, pinnedLook.a.Digest, pinnedNote(v)
		} else {
			ps.CacheNote = fmt.Sprintf("the fleet cache %s has no artifact for it yet; apply asks again once %s ran (its key includes what they make)",
				pl.e.opts.Cache, strings.Join(upstream, ", "))
		}
	}
	switch {
	case ps.FromCache != "":
		ps.Reason += "; from cache " + shortDigest(ps.FromCache) + pinned
	case ps.CacheNote != "":
		ps.Reason += "; " + ps.CacheNote
	}
	return looked
}

// preflight runs the step's check before the run (Preflighter): its lines go under the
// step, its failure fails the plan, and a disk need that fits is kept for the check of
// steps that share a file system.
func (pl *planner) preflight(ctx context.Context, v *vertex, env *Env, ps *PlannedStep, looked *lookup) {
	var lines []string
	var need *DiskNeed
	var ok bool
	var perr error
	if g := pl.e.guard(v, env, "", "checking before the run", func() error {
		lines, need, ok, perr = pl.e.preflight(ctx, v, env, ps.Fingerprint, looked)
		return nil
	}); g != nil {
		ok, perr = true, g
	}
	if !ok {
		return
	}
	ps.Details = append(ps.Details, lines...)
	if perr != nil {
		ps.Error = exitcode.Message(perr)
		pl.problems = append(pl.problems, fmt.Errorf("step %s: %w", v.step.Name, perr))
	}
	if need != nil && need.Need > 0 && need.Need <= need.Free {
		pl.needs = append(pl.needs, stepNeed{v.step.Name, *need})
	}
}

// stepNeed is one step's disk need, as its preflight said.
type stepNeed struct {
	step string
	DiskNeed
}

// sharedDiskProblems adds up the needs of the steps that each fit on their own, file system
// by file system, and returns one exitcode.ErrHost problem for each file system where together they
// do not fit, naming the steps, the total and the free space (the least any step saw). A
// step that cannot fit on its own is its own problem already and is left out of the sum.
func sharedDiskProblems(needs []stepNeed) []error {
	var order []uint64
	byFS := map[uint64][]stepNeed{}
	for _, n := range needs {
		if _, ok := byFS[n.FS]; !ok {
			order = append(order, n.FS)
		}
		byFS[n.FS] = append(byFS[n.FS], n)
	}
	var errs []error
	for _, fs := range order {
		group := byFS[fs]
		if len(group) < 2 {
			continue
		}
		var total uint64
		free := group[0].Free
		var steps, dirs []string
		for _, n := range group {
			total += n.Need
			free = min(free, n.Free)
			steps = append(steps, n.step)
			if !contains(dirs, n.Dir) {
				dirs = append(dirs, n.Dir)
			}
		}
		if total <= free {
			continue
		}
		errs = append(errs, fmt.Errorf("steps %s: %w: not enough free space on the file system of %s for all of them: %s to fetch together, %s free",
			strings.Join(steps, ", "), exitcode.ErrHost, strings.Join(dirs, ", "), logval.Format(int64(total)), logval.Format(int64(free))))
	}
	return errs
}

// preflight runs a step's plan-time check (ok false when it has none), with the step's
// cache slot when a cache is configured (a zero slot otherwise). looked is planCache's
// lookup of the same tag, if any, handed on in the slot so that the step does not ask the
// registry again.
func (e *Engine) preflight(ctx context.Context, v *vertex, env *Env, fingerprint string, looked *lookup) (lines []string, need *DiskNeed, ok bool, err error) {
	var slot CacheSlot
	if e.opts.Cache != nil {
		slot = CacheSlot{Cache: e.opts.Cache, Tag: fingerprint, looked: looked}
	}
	pf, ok := v.impl.(Preflighter)
	if !ok {
		return nil, nil, false, nil
	}
	lines, need, err = pf.Preflight(ctx, env, slot)
	return lines, need, true, err
}

// planCache looks up the artifact a step that uses the fleet cache would take; nil when it
// does not ask (no cache, no fingerprint, a step that neither restores nor publishes).
func (e *Engine) planCache(ctx context.Context, v *vertex, fingerprint string) *lookup {
	if e.opts.Cache == nil || fingerprint == "" {
		return nil
	}
	_, restorer := v.impl.(Restorer)
	_, publisher := v.impl.(Publisher)
	if !restorer && !publisher {
		return nil
	}
	a, err := e.opts.Cache.Lookup(ctx, fingerprint)
	return &lookup{a, err}
}

// noted is what plan says of a lookup: the artifact's digest, or a note when it failed.
func (l *lookup) noted() (artifact, note string) {
	switch {
	case l == nil || l.err == nil && l.a == nil:
		return "", ""
	case l.err != nil:
		return "", "cache offline (apply asks it again): " + l.err.Error()
	}
	return l.a.Digest, ""
}

// shortDigest shortens "sha256:<hex>" for a table.
func shortDigest(d string) string {
	if len(d) > 7+12 {
		return d[:7+12]
	}
	return d
}
