package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/recipe"
)

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

// adoptRecords puts the records kept with the run's generation in place of the
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
