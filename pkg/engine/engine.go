package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// Options configure an Engine.
type Options struct {
	// Drain and Undrain run the recipe's drain and undrain hooks around a switch of its
	// service (nil: none); see Env.Drain.
	Drain, Undrain func(ctx context.Context) error
	// Recipe is the parsed recipe; RecipeDir the folder recipe paths are relative to.
	Recipe    *recipe.Recipe
	RecipeDir string
	// Registry lists the step kinds.
	Registry Registry
	// Facts are the host's GPU facts (nil when none are needed or known).
	Facts *gpu.Facts
	// NodeGPUs are the IDs of every GPU of the host when Facts are not loaded (a recipe
	// that names no GPU need): its server sees them all, so it claims them all.
	NodeGPUs []string
	// Root is the host root (--root); StateDir the state directory (already rooted).
	Root, StateDir string
	// ClaimsDir is the node-wide folder of GPU claims (NodeClaimsDir, under Root), where
	// a run that passed records the GPUs its server runs on, whatever its state dir, and
	// where GPUConflicts finds the claims of recipes applied from other state dirs; ""
	// compares only the recipes of StateDir.
	ClaimsDir string
	// Only limits a run to these steps; Force runs these steps even when intact.
	Only, Force []string
	// Verify asks steps to re-check their outputs fully.
	Verify bool
	// Concurrency bounds the steps running at once (default 4).
	Concurrency int
	// NewLogger makes a logger in the run's format writing to w.
	NewLogger func(w io.Writer) *log.Logger
	// Console is where progress goes; IsTerminal says whether it is a terminal.
	Console    io.Writer
	IsTerminal bool
	// Now is the clock (time.Now by default).
	Now func() time.Time
	// Builtin holds the files shipped in the binary; InsecurePermissions accepts recipe
	// files that other users own or can write.
	Builtin             fs.FS
	InsecurePermissions bool
	// ApplyRunning is the pid of an apply that held the lock when this engine was made
	// (plan while an apply runs): the steps the state records as running are running
	// now, not interrupted. -1 when the pid is unknown.
	ApplyRunning int
	// IgnoreState builds the steps without reading the state directory (validate, which
	// may run as a user who cannot read it).
	IgnoreState bool
	// Cache is the fleet cache (nil: none). Steps that implement Restorer take their
	// outputs from it before running, and Publishers push what they made when it allows.
	Cache cache.Cache
	// OpenGenerations opens a recipe's generations kept in dir (a host path) with their
	// record at record (nil: pkg/generation's store).
	OpenGenerations func(dir, record string, keep int) (Generations, error)
	// GenerationKey, when set, is the kept generation this engine works in instead of the
	// one the recipe's inputs decide (a roll back to an earlier generation: its folder and
	// its kept step records).
	GenerationKey string
}

// Engine plans and applies one recipe.
type Engine struct {
	opts   Options
	state  *State
	store  *Store
	data   recipe.Data
	nodes  []*node
	byName map[string]*node
	log    *log.Logger

	facts   map[string]string   // the host facts as recorded in the state
	gen     *genState           // the run's generation (nil: the recipe uses none)
	group   *recipe.NodesConfig // the recipe's multi-node group (nil: a single node)
	served  bool                // this run passed: the recipe's server claims the GPUs it sees
	pending *os.File            // this run's pending GPU claim, locked while the run goes on
	mu      sync.Mutex          // guards state writes
	ranAny  bool                // a step ran (and its record changed) in this run
}

type node struct {
	step  *recipe.Step
	impl  Step
	needs []*node
	done  chan struct{}
	res   *StepReport
	// deps are the needed steps by name, for Env.Deps.
	deps map[string]Step
}

// New builds the engine: it reads the state, renders every step and builds it.
func New(opts Options) (*Engine, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewLogger == nil {
		opts.NewLogger = func(w io.Writer) *log.Logger { return log.New(w) }
	}
	if opts.Console == nil {
		opts.Console = io.Discard
	}
	st := &State{Version: StateVersion, Steps: map[string]*StepRecord{}}
	if !opts.IgnoreState {
		var err error
		if st, err = LoadRecipeState(opts.StateDir, opts.Recipe.Name); err != nil {
			return nil, err
		}
	}
	e := &Engine{opts: opts, state: st, byName: map[string]*node{}, log: opts.NewLogger(opts.Console), facts: recordedFacts(opts.Facts)}
	var facts map[string]any
	if opts.Facts != nil {
		facts = opts.Facts.TemplateData()
	}
	var err error
	if e.gen, facts, err = openGenerations(opts, facts); err != nil {
		return nil, err
	}
	e.gen.adoptRecords(st)
	data := map[string]json.RawMessage{}
	for name, rec := range st.Steps {
		data[name] = rec.Data
	}
	e.store = NewStore(data)
	e.data, err = opts.Recipe.NewData(facts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	if group, ok, err := opts.Recipe.NodesConfig(e.data); err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	} else if ok {
		e.group = &group
	}
	for _, s := range opts.Recipe.Steps {
		kind, ok := opts.Registry[s.Kind]
		if !ok {
			return nil, fmt.Errorf("%w: %s: unknown step kind %q", exitcode.ErrUsage, s.Pos, s.Kind)
		}
		spec := kind.NewSpec()
		if err := s.Render(e.data, spec); err != nil {
			return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
		}
		impl, err := kind.New(s.Name, spec)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: step %q: %v", exitcode.ErrUsage, s.Pos, s.Name, err)
		}
		n := &node{step: s, impl: impl, done: make(chan struct{}), deps: map[string]Step{}}
		e.nodes = append(e.nodes, n)
		e.byName[s.Name] = n
	}
	if err := e.checkClaims(); err != nil {
		return nil, err
	}
	for _, n := range e.nodes {
		for _, d := range n.step.Needs {
			dn := e.byName[d]
			n.needs = append(n.needs, dn)
			n.deps[d] = dn.impl
		}
	}
	for _, name := range append(append([]string{}, opts.Only...), opts.Force...) {
		if e.byName[name] == nil {
			return nil, fmt.Errorf("%w: the recipe has no step %q (steps: %s)", exitcode.ErrUsage, name, strings.Join(opts.Recipe.StepNames(), ", "))
		}
	}
	return e, nil
}

// State returns the state the engine read (and, after Apply, wrote).
func (e *Engine) State() *State { return e.state }

// env returns the Env of one step.
func (e *Engine) env(n *node, logw io.Writer, logPath string) *Env {
	if logw == nil {
		logw = io.Discard
	}
	return &Env{
		Root:                e.opts.Root,
		StateDir:            e.opts.StateDir,
		RecipeName:          e.opts.Recipe.Name,
		RecipeDir:           e.opts.RecipeDir,
		StepName:            n.step.Name,
		Facts:               e.opts.Facts,
		Profiles:            e.opts.Recipe.Profiles,
		Log:                 e.opts.NewLogger(io.MultiWriter(e.opts.Console, logw)).With("step", n.step.Name),
		Out:                 logw,
		LogPath:             logPath,
		Console:             e.opts.Console,
		IsTerminal:          e.opts.IsTerminal,
		Deps:                n.deps,
		Verify:              e.opts.Verify,
		Force:               contains(e.opts.Force, n.step.Name),
		Offline:             e.opts.Root != "" && e.opts.Root != "/",
		Builtin:             e.opts.Builtin,
		InsecurePermissions: e.opts.InsecurePermissions,
		Generation:          e.generationInfo(),
		Gated:               e.gated(n),
		Replaces:            e.opts.Recipe.Replaces,
		Drain:               e.opts.Drain,
		Undrain:             e.opts.Undrain,
		Nodes:               e.group,
		PythonLock:          e.pythonLock(),
		store:               e.store,
		promoted:            e.promoted,
	}
}

// pythonLock is the path of the recipe's python.lock ("" when it has none).
func (e *Engine) pythonLock() string {
	if e.opts.Recipe.Python == nil || e.opts.Recipe.Python.Lock == "" {
		return ""
	}
	return filepath.Join(e.opts.RecipeDir, e.opts.Recipe.Python.Lock)
}

// generationInfo returns the run's generation (nil when the recipe uses none).
func (e *Engine) generationInfo() *GenerationInfo {
	if e.gen == nil {
		return nil
	}
	info := e.gen.info
	return &info
}

// gated reports whether a selected step that needs n is a Gate: the gate then decides
// whether what n installs is kept.
func (e *Engine) gated(n *node) bool {
	for _, o := range e.nodes {
		g, ok := o.impl.(Gate)
		if !ok || !g.Gates() || len(e.opts.Only) > 0 && !contains(e.opts.Only, o.step.Name) {
			continue
		}
		for _, d := range o.needs {
			if d == n {
				return true
			}
		}
	}
	return false
}

// Decision is whether a step runs and why.
type Decision struct {
	Run    bool
	Reason string
	// Fingerprint and Parts are the step's current inputs (digests).
	Fingerprint string
	Parts       map[string]string
}

// decide computes a step's fingerprint and compares it and its outputs with the state.
func (e *Engine) decide(ctx context.Context, n *node, env *Env) (Decision, error) {
	parts, err := e.fingerprint(ctx, n, env)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Parts: parts, Fingerprint: fingerprintOf(parts)}
	rec := e.currentRecord(n.step.Name)
	if ar, ok := n.impl.(AlwaysRunner); ok && ar.AlwaysRun() {
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
	if changed := ChangedParts(rec.Parts, parts); len(changed) > 0 {
		d.Run, d.Reason = true, "fingerprint changed: "+strings.Join(e.gen.explainChanged(changed), ", ")
		return d, nil
	}
	ok, why, err := n.impl.Intact(ctx, env)
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
func (e *Engine) fingerprint(ctx context.Context, n *node, env *Env) (map[string]string, error) {
	st := n.step
	if nl, ok := n.impl.(NodeLocal); ok {
		st = st.Without(nl.NodeLocalFields()...)
	}
	parts := map[string]string{"spec": digest(st.BodyText())}
	for _, ref := range e.opts.Recipe.ExpandRefs(st) {
		parts[ref] = digest(e.data.Lookup(ref))
	}
	own, err := n.impl.Fingerprint(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("computing fingerprint: %w", err)
	}
	for k, v := range own {
		parts[k] = digest(v)
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
	// Generation says which generation apply would build into and which one serves
	// (empty when the recipe uses none).
	Generation string `json:"generation,omitempty"`
}

// planGeneration is plan's line about generations.
func (e *Engine) planGeneration() string {
	g := e.gen
	switch {
	case g == nil:
		return ""
	case g.info.Serving == g.info.Key:
		return fmt.Sprintf("%s (serving), in %s", g.info.Key, g.info.Dir)
	case g.info.Serving == "":
		return fmt.Sprintf("%s (new; none serves yet), in %s", g.info.Key, g.info.Dir)
	}
	return fmt.Sprintf("%s (new; %s serves), in %s", g.info.Key, g.info.Serving, g.info.Dir)
}

// ReadFiles reads the files the steps name (see FileReader) and returns the bad input
// among the failures (exitcode.ErrUsage), joined, each with its step; a file that is not there (an
// earlier step may make it) is left to plan and apply.
func (e *Engine) ReadFiles() error {
	var errs []error
	for _, n := range e.order() {
		fr, ok := n.impl.(FileReader)
		if !ok {
			continue
		}
		if err := fr.ReadFiles(e.env(n, nil, "")); errors.Is(err, exitcode.ErrUsage) {
			errs = append(errs, stepError(n, err))
		}
	}
	return errors.Join(errs...)
}

// Check is validate's look at every step without the host: the files the steps name (see
// ReadFiles) and what each Checker refuses from the recipe text alone. It returns the bad
// input (exitcode.ErrUsage), joined, each with its step.
func (e *Engine) Check() error {
	errs := []error{e.ReadFiles()}
	for _, n := range e.order() {
		c, ok := n.impl.(Checker)
		if !ok {
			continue
		}
		if err := c.Check(e.env(n, nil, "")); err != nil {
			errs = append(errs, stepError(n, err))
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
	var preflight []error
	var needs []stepNeed
	runs := map[string]bool{}
	for _, n := range e.order() {
		ps := PlannedStep{Name: n.step.Name, Kind: n.step.Kind, Needs: n.step.Needs}
		if len(e.opts.Only) > 0 && !contains(e.opts.Only, n.step.Name) {
			ps.Reason = ResultNotSelected
			p.Steps = append(p.Steps, ps)
			continue
		}
		var upstream []string
		var looked *lookup
		for _, d := range n.step.Needs {
			if runs[d] {
				upstream = append(upstream, d)
			}
		}
		env := e.env(n, nil, "")
		if ds, ok := n.impl.(Describer); ok {
			if err := e.guard(n, env, "", "describing", func() error { ps.Details = ds.Describe(env); return nil }); err != nil {
				ps.Details = nil
			}
		}
		var d Decision
		// A step that panics while planning is a plan error for that step, never a dead plan.
		err := e.guard(n, env, "", "planning", func() (err error) { d, err = e.decide(ctx, n, env); return err })
		switch {
		case err != nil && len(upstream) == 0:
			ps.Error = exitcode.Message(err)
			ps.Run, ps.Reason = true, "cannot tell: "+exitcode.Message(err)
			// Bad input that apply would refuse (a FIFO as a patch, a branch where a commit
			// is pinned) fails the plan too, with exit 2, after the table says why.
			if errors.Is(err, exitcode.ErrUsage) {
				preflight = append(preflight, fmt.Errorf("step %s: %w", n.step.Name, err))
			}
		case err != nil:
			ps.Run, ps.Reason = true, "needs "+strings.Join(upstream, ", ")+", which runs"
		}
		if err == nil || !errors.Is(err, exitcode.ErrUsage) {
			// The files the step reads (a series and its patches, a questions file, a token
			// file) are checked as validate checks them: bad or missing ones fail the plan.
			if fr, ok := n.impl.(FileReader); ok {
				if ferr := fr.ReadFiles(env); errors.Is(ferr, exitcode.ErrUsage) {
					ps.Error = exitcode.Message(ferr)
					preflight = append(preflight, fmt.Errorf("step %s: %w", n.step.Name, ferr))
				}
			}
		}
		switch {
		case err != nil:
		default:
			ps.Run, ps.Reason, ps.Fingerprint = d.Run, d.Reason, d.Fingerprint
			if !d.Run && len(upstream) > 0 {
				ps.Run, ps.Reason = true, "needs "+strings.Join(upstream, ", ")+", which runs"
			}
			if ps.Run && !env.Force {
				looked = e.planCache(ctx, n, d.Fingerprint)
				ps.FromCache, ps.CacheNote = looked.noted()
				switch {
				case ps.FromCache != "":
					ps.Reason += "; from cache " + shortDigest(ps.FromCache)
				case ps.CacheNote != "":
					ps.Reason += "; " + ps.CacheNote
				}
			}
		}
		if why := offlineSkip(n, env); why != "" {
			ps.Run, ps.Reason = false, why
		}
		env.Planned, env.PlannedDeps = ps.Run, upstream
		var lines []string
		var need *DiskNeed
		var ok bool
		var perr error
		if g := e.guard(n, env, "", "checking before the run", func() error {
			lines, need, ok, perr = e.preflight(ctx, n, env, ps.Fingerprint, looked)
			return nil
		}); g != nil {
			ok, perr = true, g
		}
		if ok {
			ps.Details = append(ps.Details, lines...)
			if perr != nil {
				ps.Error = exitcode.Message(perr)
				preflight = append(preflight, fmt.Errorf("step %s: %w", n.step.Name, perr))
			}
			if need != nil && need.Need > 0 && need.Need <= need.Free {
				needs = append(needs, stepNeed{n.step.Name, *need})
			}
		}
		runs[n.step.Name] = ps.Run && !converges(n)
		p.Steps = append(p.Steps, ps)
	}
	preflight = append(preflight, sharedDiskProblems(needs)...)
	if err := e.GPUConflicts(); err != nil {
		preflight = append(preflight, err)
	}
	if ctx.Err() != nil {
		// Cut short (Ctrl-C): the reasons above may be the cancellation's, not the steps'.
		preflight = append(preflight, fmt.Errorf("plan interrupted: %w", context.Cause(ctx)))
	}
	return p, errors.Join(preflight...)
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

// order returns the steps in a topological order that keeps the file order where it can.
func (e *Engine) order() []*node {
	var out []*node
	seen := map[*node]bool{}
	var visit func(n *node)
	visit = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, d := range n.needs {
			visit(d)
		}
		out = append(out, n)
	}
	for _, n := range e.nodes {
		visit(n)
	}
	return out
}

// FactsChanged lists the host facts that differ from the ones recorded by the last run,
// e.g. "driver.version 580.95.05 -> 590.44.01".
func (e *Engine) FactsChanged() []string {
	cur := e.factsMap()
	var out []string
	for _, k := range sortedKeys(cur) {
		if old, ok := e.state.Facts[k]; ok && old != cur[k] {
			out = append(out, fmt.Sprintf("%s %s -> %s", k, old, cur[k]))
		}
	}
	return out
}

func (e *Engine) factsMap() map[string]string {
	return e.facts
}

// recordedFacts returns the facts recorded in the state and compared between runs.
func recordedFacts(f *gpu.Facts) map[string]string {
	out := map[string]string{}
	if f == nil {
		return out
	}
	data := recipe.Data(f.TemplateData())
	for _, k := range recipe.FactNames() {
		if v := data.Lookup(k); v != "" {
			out[k] = v
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// saveState records the current state (every step's data included) atomically.
func (e *Engine) saveState() error {
	e.state.Version = StateVersion
	e.state.Recipe = e.opts.Recipe.Name
	e.state.Updated = e.opts.Now().UTC()
	for name, rec := range e.state.Steps {
		if d := e.store.Data(name); d != nil {
			rec.Data = d
		}
	}
	for _, n := range e.nodes {
		if e.state.Steps[n.step.Name] == nil && e.store.Data(n.step.Name) != nil {
			e.state.Steps[n.step.Name] = &StepRecord{Result: ResultFailed, Data: e.store.Data(n.step.Name)}
		}
	}
	owns := e.owns()
	for _, o := range e.state.Owns {
		// What the recipe stopped naming (a renamed unit, a moved dest, generations turned
		// off) is not forgotten: it becomes an orphan, which gc and remove free.
		if !slices.ContainsFunc(owns, func(x Owned) bool { return x.Kind == o.Kind && x.Path == o.Path }) {
			e.state.Orphan(o)
		}
	}
	e.state.Owns = owns
	return e.state.Save(e.opts.StateDir)
}

// declared returns what the recipe's steps say they install (Owner), whether or not they
// ran: a recipe with a server claims GPUs before its first run.
func (e *Engine) declared() []Owned {
	var out []Owned
	for _, n := range e.nodes {
		if o, ok := n.impl.(Owner); ok {
			out = append(out, o.Owns(e.env(n, nil, ""))...)
		}
	}
	return out
}

// owns returns what the recipe's steps install on the node (Owner) and its generations.
// A step is taken at its word once it succeeded (in this run or an earlier one); before
// that only what it lists as written is (a download's files), beside what earlier records
// name for it: a step that failed before it installed anything owns nothing new.
func (e *Engine) owns() []Owned {
	var out []Owned
	for _, n := range e.nodes {
		o, ok := n.impl.(Owner)
		if !ok {
			continue
		}
		succeeded := false
		if rec := e.state.Steps[n.step.Name]; rec != nil && rec.Result == ResultOK {
			succeeded = true
		}
		var mine []Owned
		for _, x := range o.Owns(e.env(n, nil, "")) {
			x.Step = n.step.Name
			if succeeded || x.Listed {
				mine = append(mine, x)
			}
		}
		for _, x := range e.state.Owns {
			if x.Step == n.step.Name && !slices.ContainsFunc(mine, func(y Owned) bool { return y.Kind == x.Kind && y.Path == x.Path }) && !succeeded {
				mine = append(mine, x)
			}
		}
		out = append(out, mine...)
	}
	out = append(out, e.gpuClaims(out)...)
	if e.gen != nil {
		out = append(out, Owned{Kind: OwnedGenerations, Path: HostPath(e.opts.Root, e.opts.Recipe.GenerationsDir()), Keep: e.opts.Recipe.KeepGenerations()})
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

// EnvFor returns an Env for calling a step outside a run (the daemon restarting a
// service); its log goes to the console only.
func (e *Engine) EnvFor(name string) *Env {
	n := e.byName[name]
	if n == nil {
		return nil
	}
	return e.env(n, nil, "")
}

// Close releases what the steps hold (a service manager's connection; with the exec
// manager, the server it supervises). Call it when done with the engine.
func (e *Engine) Close() error {
	var first error
	for _, n := range e.nodes {
		if c, ok := n.impl.(io.Closer); ok {
			if err := c.Close(); err != nil && first == nil {
				first = fmt.Errorf("closing step %s: %w", n.step.Name, err)
			}
		}
	}
	return first
}

// preflight runs a step's plan-time check (ok false when it has none), with the step's
// cache slot when a cache is configured (a zero slot otherwise). looked is planCache's
// lookup of the same tag, if any, handed on in the slot so that the step does not ask the
// registry again.
func (e *Engine) preflight(ctx context.Context, n *node, env *Env, fingerprint string, looked *lookup) (lines []string, need *DiskNeed, ok bool, err error) {
	var slot CacheSlot
	if e.opts.Cache != nil {
		slot = CacheSlot{Cache: e.opts.Cache, Tag: fingerprint, looked: looked}
	}
	pf, ok := n.impl.(Preflighter)
	if !ok {
		return nil, nil, false, nil
	}
	lines, need, err = pf.Preflight(ctx, env, slot)
	return lines, need, true, err
}

// planCache looks up the artifact a step that uses the fleet cache would take; nil when it
// does not ask (no cache, no fingerprint, a step that neither restores nor publishes).
func (e *Engine) planCache(ctx context.Context, n *node, fingerprint string) *lookup {
	if e.opts.Cache == nil || fingerprint == "" {
		return nil
	}
	_, restorer := n.impl.(Restorer)
	_, publisher := n.impl.(Publisher)
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
		return "", "cache: " + l.err.Error()
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
