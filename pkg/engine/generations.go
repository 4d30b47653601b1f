package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// GenerationStore is what the engine asks of the store of a recipe's generations
// (pkg/generation's Store): the folder of one, the one that serves, and recording that one
// is being built or passed. It is not the daemon's rung that rolls a node back to its
// previous generation.
type GenerationStore interface {
	// Serving returns the key of the last generation that passed ("" when none has).
	Serving() string
	// Begin records that this run builds into the generation with key.
	Begin(key string) error
	// Steps returns the step records kept with the generation when it passed.
	Steps(key string) map[string]json.RawMessage
	// Passed records that the generation passed, with its steps' records, makes it the
	// serving one and removes the generations beyond the kept ones.
	Passed(key string, steps map[string]json.RawMessage) (*generation.Pruned, error)
}

// GenerationInfo tells a step which generation this run builds and which one serves.
type GenerationInfo struct {
	// Key is the generation this run builds into; Dir its folder (the node's path).
	Key, Dir string
	// Serving is the generation that last passed ("" when none has).
	Serving string
	// InPlaceServes is set when no generation serves because a roll back put back the tree
	// a migration to generations moved aside from the roots (the generations record's
	// in_place).
	InPlaceServes bool
}

// GenerationReport is what a run says about generations.
type GenerationReport struct {
	// Building is the generation this run built into; Serving the one that serves at the
	// end of the run.
	Building string `json:"building"`
	Serving  string `json:"serving,omitempty"`
	// Pruned says what was kept and freed once Building passed.
	Pruned *generation.Pruned `json:"pruned,omitempty"`
	// Note is the sentence the summary prints.
	Note string `json:"note"`
}

// genState is the engine's view of the generation of one run.
type genState struct {
	info  GenerationInfo
	steps []string // the generation steps, in file order
	store GenerationStore
	// parts are the named digests of the key; changed the names of those that differ
	// from the serving generation's (when it recorded its own), for plan's reasons.
	parts   map[string]string
	changed []string
	// served is set when the run's generation has served (it passed, or the installed unit
	// runs it): no generation step writes into it.
	served bool
	// repaired says how the record was repaired to name the generation the installed unit
	// runs ("" when it named it already).
	repaired string
	// promoted is set once a switch in this run promoted a unit of this generation: it
	// was recorded as passed then (Engine.promoted). Guarded by the engine's mu.
	promoted bool
	// freedEarly is what the run freed before it built (failed generations), which the
	// run's note says with what it freed at the end.
	freedEarly *generation.Pruned
}

// rootStore is implemented by a GenerationStore that keeps a link at each of the recipe's
// generation roots pointing into the serving generation (pkg/generation's Store).
type rootStore interface {
	SetRoots(nodeDir string, roots []generation.Root)
}

// inPlaceStore is implemented by a GenerationStore that records whether the trees moved aside
// from the roots serve again (pkg/generation's Store).
type inPlaceStore interface {
	InPlaceServing() *generation.InPlace
}

// observerStore is implemented by a GenerationStore that takes the generation the installed
// unit runs as the serving one, whatever its record says, and can record it (pkg/generation's
// Store).
type observerStore interface {
	Observe(unitFiles ...string) string
	Repair() (string, error)
}

// ServingUnitFiles returns the files of the units owns lists that a restart or a reboot
// starts: /etc/systemd/system/UNIT under root for systemd, the last-known-good copy under
// stateDir for the exec manager. Which generation serves is read from them.
func ServingUnitFiles(root, stateDir string, owns []Owned) []string {
	var out []string
	for _, o := range owns {
		if o.Kind != OwnedUnit || o.Path == "" || strings.ContainsRune(o.Path, '/') {
			continue
		}
		if o.Manager == service.KindExec {
			out = append(out, service.LastKnownGoodPath(stateDir, o.Path))
			continue
		}
		out = append(out, path.Join(HostPath(root, service.SystemUnitDir), o.Path))
	}
	return out
}

// servingFromUnit takes the generation the recipe's installed unit runs (owns' units) as the
// serving one of store, and records it when the record names another (with dryRun it
// only says so). It returns what it repaired or would repair ("" when nothing).
func servingFromUnit(store *generation.Store, root, stateDir string, owns []Owned, dryRun bool) (string, error) {
	store.Observe(ServingUnitFiles(root, stateDir, owns)...)
	recorded, runs, ok := store.Mismatch()
	if !ok {
		return "", nil
	}
	if dryRun {
		was := "no generation"
		if recorded != "" {
			was = "generation " + generation.Short(recorded)
		}
		return fmt.Sprintf("the record names %s as serving while the installed unit runs generation %s: it is kept, and gc records it as serving", was, generation.Short(runs)), nil
	}
	msg, err := store.Repair()
	if err != nil {
		return "", fmt.Errorf("recording generation %s, which the installed unit runs, as serving: %w", generation.Short(runs), err)
	}
	return msg, nil
}

// observe takes the generation the recipe's installed unit runs as the serving one (see
// generation.Store.Observe): every prune and roll back of this run keeps it.
func (g *genState) observe(opts Options, st *State) {
	if g == nil || g.store == nil {
		return
	}
	ob, ok := g.store.(observerStore)
	if !ok {
		return
	}
	ob.Observe(ServingUnitFiles(opts.Root, opts.StateDir, st.Owns)...)
	g.info.Serving = g.store.Serving()
	if g.info.Serving != "" {
		g.info.InPlaceServes = false
	}
}

// servedStore is implemented by a GenerationStore that knows which generations have served
// (pkg/generation's Store).
type servedStore interface {
	Served(key string) bool
}

// readOnly reports whether step is a generation step and the run's generation has served:
// nothing writes into it again.
func (g *genState) readOnly(step string) bool {
	return g != nil && g.served && slices.Contains(g.steps, step)
}

// ErrServedGeneration is the error of a generation step refused because it would write
// into a generation that has served.
var ErrServedGeneration = errors.New("the generation has served and is read-only")

// writeRefusal is the error of step, which would run (for reason) in the run's generation,
// which has served.
func (g *genState) writeRefusal(step, reason string) error {
	return fmt.Errorf("step %s would write into generation %s (%s), which has served: %w; its server reads that folder, so it is used as it is or not at all. An input outside the generation's key changed: change an input of the key (the pin, a patch, a var the step uses) to build a new generation beside it",
		step, generation.Short(g.info.Key), reason, ErrServedGeneration)
}

// keyPartsStore is implemented by a GenerationStore that keeps the named digests of each
// generation's key (pkg/generation's Store).
type keyPartsStore interface {
	BeginWith(key string, parts map[string]string) error
	Parts(key string) map[string]string
}

// placeholderDir stands for the generation's folder while its key is computed: the key
// cannot depend on the folder it names.
const placeholderDir = "/@generation@"

// GenerationKeyer is implemented by steps that build into a generation and whose result
// depends on inputs outside their recipe text that can be known before the generation is
// built (a build's compiler version): they join the generation's key, so that a change
// builds a new generation instead of rewriting the serving one. env's Generation.Dir is a
// placeholder; a program inside it does not exist yet.
type GenerationKeyer interface {
	GenerationKey(ctx context.Context, env *Env) (map[string]string, error)
}

// keyEnv is the Env a GenerationKeyer sees: the host, the facts, and the placeholder
// generation folder; no log, no records.
func keyEnv(opts Options, step string) *Env {
	return &Env{Root: opts.Root, StateDir: opts.StateDir, RecipeName: opts.Recipe.Name, RecipeDir: opts.RecipeDir,
		StepName: step, Facts: opts.Facts, Log: log.New(io.Discard), Out: io.Discard, Console: io.Discard,
		Deps: map[string]Step{}, Offline: opts.Root != "" && opts.Root != "/", Builtin: opts.Builtin,
		InsecurePermissions: opts.InsecurePermissions, Generation: &GenerationInfo{Dir: placeholderDir}, store: NewStore(nil)}
}

// withGeneration returns facts with .generation.dir set to dir.
func withGeneration(facts map[string]any, dir string) map[string]any {
	out := make(map[string]any, len(facts)+1)
	for k, v := range facts {
		out[k] = v
	}
	out["generation"] = map[string]any{"dir": dir}
	return out
}

// generationKey returns the key of the generation the recipe's generation steps build:
// a digest of each one's recipe text (less its node-local fields) and of every var and fact
// that text uses, with the generation's own folder left out; and the names of those steps.
func generationKey(ctx context.Context, opts Options, facts map[string]any) (string, []string, map[string]string, error) {
	r := opts.Recipe
	data, err := r.NewData(withGeneration(facts, placeholderDir))
	if err != nil {
		return "", nil, nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	parts := map[string]string{}
	var steps []string
	for _, s := range r.Steps {
		if !r.InGeneration(s) || opts.Registry[s.Kind].ReadsGeneration {
			continue
		}
		steps = append(steps, s.Name)
		st := s
		var impl Step
		if kind, ok := opts.Registry[s.Kind]; ok {
			spec := kind.NewSpec()
			if s.Render(data, spec) == nil {
				if built, err := kind.New(s.Name, spec); err == nil {
					impl = built
					if nl, ok := impl.(NodeLocal); ok {
						st = st.Without(nl.NodeLocalFields()...)
					}
				}
			}
			if kind.UsesFacts {
				for k, v := range recordedFacts(opts.Facts) {
					if len(kind.Facts) == 0 || slices.Contains(kind.Facts, k) {
						parts[s.Name+"."+k] = digest(v)
					}
				}
			}
		}
		if k, ok := impl.(GenerationKeyer); ok && !opts.IgnoreState {
			own, err := k.GenerationKey(ctx, keyEnv(opts, s.Name))
			if err != nil {
				return "", nil, nil, fmt.Errorf("step %s: working out its generation: %w", s.Name, err)
			}
			for name, v := range own {
				parts[s.Name+"."+name] = digest(v)
			}
		}
		parts[s.Name+".spec"] = digest(st.BodyText())
		for _, ref := range r.ExpandRefs(st) {
			if ref != recipe.GenerationDirRef {
				parts[s.Name+"."+ref] = digest(data.Lookup(ref))
			}
		}
	}
	return generation.Key(parts), steps, parts, nil
}

// openGenerations works out the run's generation (nil when no step of the recipe builds
// into one) and opens the recipe's generations; facts gain .generation.dir.
func openGenerations(opts Options, facts map[string]any) (*genState, map[string]any, error) {
	r := opts.Recipe
	if !r.UsesGenerations() {
		return nil, facts, nil
	}
	if opts.InPlace {
		dir, ok := r.InPlaceGenerationDir()
		if !ok {
			return nil, nil, fmt.Errorf("%w: recipe %s has no folder that holds all its generation roots under their own names: its paths as written cannot be rendered", exitcode.ErrUsage, r.Name)
		}
		return &genState{info: GenerationInfo{Dir: dir}}, withGeneration(facts, dir), nil
	}
	key, steps, parts, err := generationKey(context.Background(), opts, facts)
	if err != nil {
		return nil, nil, err
	}
	if opts.GenerationKey != "" {
		key, parts = opts.GenerationKey, nil
	}
	g := &genState{steps: steps, parts: parts, info: GenerationInfo{Key: key, Dir: path.Join(r.GenerationsDir(), key)}}
	if !opts.IgnoreState {
		open := opts.OpenGenerations
		if open == nil {
			open = func(dir, record string, keep int) (GenerationStore, error) {
				return generation.Open(dir, record, keep)
			}
		}
		g.store, err = open(HostPath(opts.Root, r.GenerationsDir()), GenerationsRecordPath(opts.StateDir, r.Name), r.KeepGenerations())
		if err != nil {
			return nil, nil, err
		}
		g.info.Serving = g.store.Serving()
		if ip, ok := g.store.(inPlaceStore); ok && g.info.Serving == "" {
			g.info.InPlaceServes = ip.InPlaceServing() != nil
		}
		if rs, ok := g.store.(rootStore); ok && len(r.GenerationRoots()) > 0 {
			roots := make([]generation.Root, 0, len(r.GenerationRoots()))
			for _, root := range r.GenerationRoots() {
				roots = append(roots, generation.Root{Link: HostPath(opts.Root, root.Path), Sub: root.Sub})
			}
			rs.SetRoots(r.GenerationsDir(), roots)
		}
		if ps, ok := g.store.(keyPartsStore); ok && parts != nil && g.info.Serving != "" && g.info.Serving != key {
			if old := ps.Parts(g.info.Serving); old != nil {
				g.changed = ChangedParts(old, parts)
			}
		}
	}
	return g, withGeneration(facts, g.info.Dir), nil
}

// adoptGenerationRecords puts the records kept with the run's generation in place of the
// state's, for the generation steps whose record is of another generation: going back to
// a generation that is still kept builds nothing again.
func (g *genState) adoptRecords(st *State) {
	if g == nil || g.store == nil {
		return
	}
	if ss, ok := g.store.(servedStore); ok {
		g.served = ss.Served(g.info.Key)
	}
	kept := g.store.Steps(g.info.Key)
	want := digest(g.info.Dir)
	for _, name := range g.steps {
		raw, ok := kept[name]
		if !ok {
			continue
		}
		// A record of this generation's folder that is not a success (a later build of
		// another generation failed in this step and left its record) is replaced too:
		// the kept record is how the generation stood when it passed.
		if cur := st.Steps[name]; cur != nil && cur.Parts[recipe.GenerationDirRef] == want && cur.Result == ResultOK {
			continue
		}
		var rec StepRecord
		if json.Unmarshal(raw, &rec) == nil {
			st.Steps[name] = &rec
		}
	}
}

// begin records that the run builds into its generation.
func (e *Engine) beginGeneration() error {
	g := e.gen
	if g == nil || g.store == nil {
		return nil
	}
	var err error
	if ps, ok := g.store.(keyPartsStore); ok && g.parts != nil {
		err = ps.BeginWith(g.info.Key, g.parts)
	} else {
		err = g.store.Begin(g.info.Key)
	}
	if err != nil {
		return err
	}
	// A record that names another generation than the installed unit runs (a switch
	// killed after its promotion) is repaired before anything is freed.
	if ob, ok := g.store.(observerStore); ok {
		msg, err := ob.Repair()
		switch {
		case err != nil:
			e.log.Warn("recording the generation the installed unit runs", "err", err)
		case msg != "":
			e.log.Warn("generation: " + msg)
			g.repaired = msg
		}
	}
	if g.info.Serving != g.info.Key && g.kept() {
		e.log.Info("generation", "back_to", generation.Short(g.info.Key), "kept", "passed before: its step records are kept, nothing is built again", "serving", shortOr(g.info.Serving, "none"), "dir", g.info.Dir)
	} else if g.info.Serving != g.info.Key {
		e.log.Info("generation", "building", generation.Short(g.info.Key), "serving", shortOr(g.info.Serving, "none"), "dir", g.info.Dir)
		// Before a build, the recipe's failed generations go (never the serving one, the
		// kept ones, the one being built, nor one another state dir's record lists): a
		// new pin after a failed one does not find the disk full of it.
		if pr, ok := g.store.(pruner); ok {
			p, err := pr.PruneKeeping(g.info.Key, false)
			switch {
			case err != nil:
				e.log.Warn("freeing failed generations", "err", err)
			case p != nil && len(p.Freed) > 0:
				e.log.Info("generation", "freed", p.Describe(logval.Format))
				g.freedEarly = p
			}
		}
	}
	return nil
}

// pruner is implemented by a GenerationStore that can free the generations beyond the kept
// ones (pkg/generation's Store).
type pruner interface {
	PruneKeeping(building string, dryRun bool) (*generation.Pruned, error)
}

// gcPruner is implemented by a GenerationStore that prunes as `sglprov gc` does
// (pkg/generation's Store).
type gcPruner interface {
	Prune(dryRun bool) (*generation.Pruned, error)
}

// noSpaceHint adds to the error of a generation step that ran out of disk space (ENOSPC,
// or "No space left on device" in its error or the tail of its log) what `sglprov gc`
// would free in the recipe's generations.
func (e *Engine) noSpaceHint(step string, runErr error, logPath string) error {
	g := e.gen
	if g == nil || g.store == nil || !slices.Contains(g.steps, step) || !noSpace(runErr, logPath) {
		return runErr
	}
	hint := "`sglprov gc` frees the generations beyond the kept ones (`sglprov gc --dry-run` lists them)"
	// What gc would free is what its own prune frees (gc --dry-run): the generation this
	// run half built is among it, since gc keeps no generation being built.
	if pr, ok := g.store.(gcPruner); ok {
		if p, err := pr.Prune(true); err == nil && p != nil {
			if len(p.Freed) > 0 {
				freed := make([]string, 0, len(p.Freed))
				for _, f := range p.Freed {
					freed = append(freed, generation.Short(f.Key))
				}
				hint = fmt.Sprintf("`sglprov gc` would free %s of generations (%d of them: %s; `sglprov gc --dry-run` lists them and the part files it frees)", logval.Format(p.Bytes), len(p.Freed), strings.Join(freed, ", "))
			} else {
				hint = fmt.Sprintf("`sglprov gc` would free no generation (%s are kept: lower generations.keep to free more; gc also frees weights' part files and orphans, see `sglprov gc --dry-run`)", strings.Join(shortKeys(p.Kept), ", "))
			}
		}
	}
	return fmt.Errorf("%w\nthe disk of %s is full: %s", runErr, g.info.Dir, hint)
}

func shortKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = generation.Short(k)
	}
	return out
}

// noSpaceText is how a child process says ENOSPC.
const noSpaceText = "No space left on device"

// noSpaceLogTail is how much of a step's log noSpace reads, from its end.
const noSpaceLogTail = 64 << 10

// noSpace reports whether err, or the last noSpaceLogTail bytes of the log at logPath,
// say that a disk was full.
func noSpace(err error, logPath string) bool {
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), noSpaceText) {
		return true
	}
	f, ferr := os.Open(logPath)
	if ferr != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > noSpaceLogTail {
		if _, err := f.Seek(-noSpaceLogTail, io.SeekEnd); err != nil {
			return false
		}
	}
	b, _ := io.ReadAll(io.LimitReader(f, noSpaceLogTail))
	return strings.Contains(string(b), noSpaceText)
}

// endGeneration records the run's generation as passed when the run succeeded (and was
// not limited with --only), and says which generation serves.
func (e *Engine) endGeneration(ok bool) *GenerationReport {
	g := e.gen
	if g == nil || g.store == nil {
		return nil
	}
	gr := &GenerationReport{Building: g.info.Key, Serving: g.info.Serving}
	defer func() {
		if g.repaired != "" {
			gr.Note += "; " + g.repaired
		}
	}()
	if ok && e.opts.Root != "" && e.opts.Root != "/" {
		// Under --root nothing was started and no gate ran: the generation is recorded as
		// built, never as passed, so "current" does not flip and it is no roll-back target.
		gr.Note = fmt.Sprintf("generation %s built under --root, not gated: not recorded as passed", generation.Short(g.info.Key))
		if g.info.Serving != "" && g.info.Serving != g.info.Key {
			gr.Note += fmt.Sprintf("; generation %s serves", generation.Short(g.info.Serving))
		}
		return gr
	}
	e.mu.Lock()
	promoted := g.promoted
	e.mu.Unlock()
	if (!ok || len(e.opts.Only) > 0) && !promoted {
		switch {
		case g.info.Serving == g.info.Key:
			gr.Note = fmt.Sprintf("generation %s serves", generation.Short(g.info.Key))
		case g.info.Serving == "" && g.info.InPlaceServes:
			gr.Note = fmt.Sprintf("generation %s has not passed; the in-place tree moved aside serves", generation.Short(g.info.Key))
		case g.info.Serving == "":
			gr.Note = fmt.Sprintf("generation %s has not passed; no generation has passed yet", generation.Short(g.info.Key))
		default:
			gr.Note = fmt.Sprintf("generation %s has not passed; generation %s serves", generation.Short(g.info.Key), generation.Short(g.info.Serving))
		}
		if f := g.freedEarly; f != nil {
			gr.Note += fmt.Sprintf("; freed %s (%s) before building", freedKeys(f.Freed), logval.Format(f.Bytes))
		}
		return gr
	}
	// Recording it again after a promotion is harmless: the same generation serves, with
	// the step records as the run left them.
	pruned, err := e.passGeneration()
	gr.Serving, gr.Pruned = g.info.Key, pruned
	gr.Note = fmt.Sprintf("generation %s serves", generation.Short(g.info.Key))
	if g.info.Serving != "" && g.info.Serving != g.info.Key {
		gr.Note += fmt.Sprintf(" (was %s)", generation.Short(g.info.Serving))
	} else if g.info.Serving == "" && g.info.InPlaceServes {
		gr.Note += " (was the in-place tree moved aside)"
	}
	if f := g.freedEarly; f != nil && pruned != nil {
		// What the run freed before it built is freed by this run too.
		pruned.Freed, pruned.Bytes = append(append([]generation.Freed(nil), f.Freed...), pruned.Freed...), pruned.Bytes+f.Bytes
	}
	if pruned != nil {
		gr.Note += "; " + pruned.Describe(logval.Format)
	}
	if err != nil {
		e.log.Warn("recording the generation", "err", err)
		gr.Note += "; " + err.Error()
	}
	return gr
}

// passGeneration records the run's generation as passed with the step records the engine
// holds now (GenerationStore.Passed).
func (e *Engine) passGeneration() (*generation.Pruned, error) {
	g := e.gen
	steps := map[string]json.RawMessage{}
	e.mu.Lock()
	for _, name := range g.steps {
		if rec := e.state.Steps[name]; rec != nil {
			if b, err := json.Marshal(rec); err == nil {
				steps[name] = b
			}
		}
	}
	e.mu.Unlock()
	return g.store.Passed(g.info.Key, steps)
}

// promoted is Env.Promoted: a switch promoted a unit of the run's generation, whose
// folder its server now reads from. The generation is recorded as passed at once, not
// at the end of the run: a later step that fails, an interrupt or --only would otherwise
// leave the record naming the generation before it as serving, and a gc or the next
// build's prune would remove the folder the installed unit runs from.
func (e *Engine) promoted() error {
	g := e.gen
	if g == nil || g.store == nil || e.opts.Root != "" && e.opts.Root != "/" {
		return nil
	}
	pruned, err := e.passGeneration()
	e.mu.Lock()
	g.promoted = true
	e.mu.Unlock()
	if pruned != nil && len(pruned.Freed) > 0 {
		e.log.Info("generation", "freed", pruned.Describe(logval.Format))
	}
	if err != nil {
		return fmt.Errorf("recording generation %s as serving: %w", generation.Short(g.info.Key), err)
	}
	return nil
}

func shortOr(key, none string) string {
	if key == "" {
		return none
	}
	return generation.Short(key)
}

// GenerationPassed records the engine's generation as passed with the step records the
// engine holds (it becomes the serving one, "current" flips to it, generations beyond the
// kept ones go) and writes the state: after a roll back that passed its gate, the next
// apply knows which generation serves. nil when the recipe keeps no generations.
func (e *Engine) GenerationPassed() (*GenerationReport, error) {
	gr := e.endGeneration(true)
	if gr == nil {
		return nil, nil
	}
	if e.gen != nil {
		e.gen.info.Serving = e.gen.info.Key
	}
	return gr, e.SaveState()
}

// explainChanged names, after the generation's folder among a step's changed inputs, the
// inputs of the generation's key that differ from the serving generation's ("kernel.gpu.arch_list"):
// plan says which fact or text made a new generation, not only that its folder moved.
func (g *genState) explainChanged(changed []string) []string {
	if g == nil || len(g.changed) == 0 {
		return changed
	}
	out := make([]string, len(changed))
	for i, c := range changed {
		out[i] = c
		if c == recipe.GenerationDirRef {
			if g.kept() {
				out[i] = c + " (back to kept generation " + generation.Short(g.info.Key) + ": " + strings.Join(g.changed, ", ") + " changed)"
			} else {
				out[i] = c + " (new generation: " + strings.Join(g.changed, ", ") + " changed)"
			}
		}
	}
	return out
}

// kept reports whether the run's generation is one that passed its gate before and is
// kept with its step records (not the serving one): going back to it builds nothing.
func (g *genState) kept() bool {
	return g != nil && g.store != nil && g.info.Key != "" && g.info.Key != g.info.Serving && len(g.store.Steps(g.info.Key)) > 0
}

// passedAt is when the run's kept generation last passed (zero when unknown).
func (g *genState) passedAt() time.Time {
	type lister interface {
		Generations() []generation.Generation
	}
	if l, ok := g.store.(lister); ok {
		for _, x := range l.Generations() {
			if x.Key == g.info.Key {
				return x.Passed
			}
		}
	}
	return time.Time{}
}

// withoutGenerationOnly drops from changed, when the generation's folder changed, the vars
// whose value changed only because it names the generation's folder (a generation root
// var, {{ .vars.src }} rendered into each generation): their text did not change, and
// naming them in every generation step's reason says nothing. old are the step's recorded
// parts, lookup renders a reference now. The folder recorded is recognised among the
// generations kept (the serving one first).
func (g *genState) withoutGenerationOnly(changed []string, old map[string]string, lookup func(string) string) []string {
	if g == nil || g.store == nil || !slices.Contains(changed, recipe.GenerationDirRef) {
		return changed
	}
	oldDir := ""
	for _, k := range append([]string{g.info.Serving}, g.keys()...) {
		if k == "" {
			continue
		}
		if dir := path.Join(path.Dir(g.info.Dir), k); digest(dir) == old[recipe.GenerationDirRef] {
			oldDir = dir
			break
		}
	}
	if oldDir == "" {
		return changed
	}
	out := changed[:0:0]
	for _, c := range changed {
		if strings.HasPrefix(c, "vars.") {
			if v := lookup(c); strings.Contains(v, g.info.Dir) && digest(strings.ReplaceAll(v, g.info.Dir, oldDir)) == old[c] {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

// keys returns the keys of the generations the store records (nil when it cannot list them).
func (g *genState) keys() []string {
	type lister interface {
		Generations() []generation.Generation
	}
	l, ok := g.store.(lister)
	if !ok {
		return nil
	}
	var out []string
	for _, x := range l.Generations() {
		out = append(out, x.Key)
	}
	return out
}

// freedKeys lists freed generations by short key.
func freedKeys(freed []generation.Freed) string {
	keys := make([]string, 0, len(freed))
	for _, f := range freed {
		keys = append(keys, generation.Short(f.Key))
	}
	return strings.Join(keys, ", ")
}
