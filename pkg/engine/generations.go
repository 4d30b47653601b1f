package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Generations is what the engine asks of a recipe's generations (pkg/generation's Store):
// the folder of one, the one that serves, and recording that one is being built or passed.
type Generations interface {
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
	store Generations
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
func generationKey(ctx context.Context, opts Options, facts map[string]any) (string, []string, error) {
	r := opts.Recipe
	data, err := r.NewData(withGeneration(facts, placeholderDir))
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	parts := map[string]string{}
	var steps []string
	for _, s := range r.Steps {
		if !r.InGeneration(s) {
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
					parts[s.Name+"."+k] = digest(v)
				}
			}
		}
		if k, ok := impl.(GenerationKeyer); ok && !opts.IgnoreState {
			own, err := k.GenerationKey(ctx, keyEnv(opts, s.Name))
			if err != nil {
				return "", nil, fmt.Errorf("step %s: working out its generation: %w", s.Name, err)
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
	return generation.Key(parts), steps, nil
}

// openGenerations works out the run's generation (nil when no step of the recipe builds
// into one) and opens the recipe's generations; facts gain .generation.dir.
func openGenerations(opts Options, facts map[string]any) (*genState, map[string]any, error) {
	r := opts.Recipe
	if !r.UsesGenerations() {
		return nil, facts, nil
	}
	key, steps, err := generationKey(context.Background(), opts, facts)
	if err != nil {
		return nil, nil, err
	}
	if opts.GenerationKey != "" {
		key = opts.GenerationKey
	}
	g := &genState{steps: steps, info: GenerationInfo{Key: key, Dir: path.Join(r.GenerationsDir(), key)}}
	if !opts.IgnoreState {
		open := opts.OpenGenerations
		if open == nil {
			open = func(dir, record string, keep int) (Generations, error) {
				return generation.Open(dir, record, keep)
			}
		}
		g.store, err = open(HostPath(opts.Root, r.GenerationsDir()), GenerationsRecordPath(opts.StateDir, r.Name), r.KeepGenerations())
		if err != nil {
			return nil, nil, err
		}
		g.info.Serving = g.store.Serving()
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
	kept := g.store.Steps(g.info.Key)
	want := digest(g.info.Dir)
	for _, name := range g.steps {
		raw, ok := kept[name]
		if !ok {
			continue
		}
		if cur := st.Steps[name]; cur != nil && cur.Parts[recipe.GenerationDirRef] == want {
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
	if err := g.store.Begin(g.info.Key); err != nil {
		return err
	}
	if g.info.Serving != g.info.Key {
		e.log.Info("generation", "building", generation.Short(g.info.Key), "serving", shortOr(g.info.Serving, "none"), "dir", g.info.Dir)
	}
	return nil
}

// endGeneration records the run's generation as passed when the run succeeded (and was
// not limited with --only), and says which generation serves.
func (e *Engine) endGeneration(ok bool) *GenerationReport {
	g := e.gen
	if g == nil || g.store == nil {
		return nil
	}
	gr := &GenerationReport{Building: g.info.Key, Serving: g.info.Serving}
	if ok && e.opts.Root != "" && e.opts.Root != "/" {
		// Under --root nothing was started and no gate ran: the generation is recorded as
		// built, never as passed, so "current" does not flip and it is no roll-back target.
		gr.Note = fmt.Sprintf("generation %s built under --root, not gated: not recorded as passed", generation.Short(g.info.Key))
		if g.info.Serving != "" && g.info.Serving != g.info.Key {
			gr.Note += fmt.Sprintf("; generation %s serves", generation.Short(g.info.Serving))
		}
		return gr
	}
	if !ok || len(e.opts.Only) > 0 {
		switch {
		case g.info.Serving == g.info.Key:
			gr.Note = fmt.Sprintf("generation %s serves", generation.Short(g.info.Key))
		case g.info.Serving == "":
			gr.Note = fmt.Sprintf("generation %s has not passed; no generation has passed yet", generation.Short(g.info.Key))
		default:
			gr.Note = fmt.Sprintf("generation %s has not passed; generation %s serves", generation.Short(g.info.Key), generation.Short(g.info.Serving))
		}
		return gr
	}
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
	pruned, err := g.store.Passed(g.info.Key, steps)
	gr.Serving, gr.Pruned = g.info.Key, pruned
	gr.Note = fmt.Sprintf("generation %s serves", generation.Short(g.info.Key))
	if g.info.Serving != "" && g.info.Serving != g.info.Key {
		gr.Note += fmt.Sprintf(" (was %s)", generation.Short(g.info.Serving))
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
