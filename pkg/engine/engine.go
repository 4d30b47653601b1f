package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/gpuclaim"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
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
	// ClaimsDir is the node-wide folder of GPU claims (gpuclaim.NodeClaimsDir, under Root), where
	// a run that passed records the GPUs its server runs on, whatever its state dir, and
	// where GPUConflicts finds the claims of recipes applied from other state dirs; ""
	// compares only the recipes of StateDir.
	ClaimsDir string
	// StateDirsDir is the node-wide registry of state dirs (NodeStateDirsDir, under Root),
	// where a run registers StateDir before it writes anything, so that remove and gc in
	// another state dir see what this one's recipes use; "" keeps none.
	StateDirsDir string
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
	OpenGenerations func(dir, record string, keep int) (GenerationStore, error)
	// GenerationKey, when set, is the kept generation this engine works in instead of the
	// one the recipe's inputs decide (a roll back to an earlier generation: its folder and
	// its kept step records).
	GenerationKey string
	// InPlace makes the engine work in the recipe's roots as they stand, as an in-place
	// run did ({{ .generation.dir }} is the roots' folder, recipe.InPlaceGenerationDir):
	// a roll back to the tree a migration to generations moved aside. No generation is
	// recorded as built or passed.
	InPlace bool
	// NewManager makes the service manager a service step installs and starts its unit
	// with (nil: service.New); see Env.ServiceManager.
	NewManager func(ctx context.Context, opts service.Options) (service.Manager, error)
}

// Engine plans and applies one recipe.
type Engine struct {
	opts     Options
	state    *State
	store    *Store
	data     recipe.Data
	vertices []*vertex
	byName   map[string]*vertex
	log      *log.Logger

	facts   map[string]string   // the host facts as recorded in the state
	gen     *genState           // the run's generation (nil: the recipe uses none)
	members *recipe.NodesConfig // the members of the recipe's multi-node group (nil: this host alone)
	served  bool                // this run passed: the recipe's server claims the GPUs it sees
	pending *gpuclaim.Pending   // this run's pending GPU claim, locked while the run goes on
	mu      sync.Mutex          // guards state writes
	ranAny  bool                // a step ran (and its record changed) in this run

	afterGate afterGate // pushes held until a gate passed (AfterGatePublisher)
}

// vertex is one step of the recipe in the run's DAG: the steps it needs, and its outcome
// once done is closed.
type vertex struct {
	step  *recipe.Step
	impl  Step
	needs []*vertex
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
	e := &Engine{opts: opts, state: st, byName: map[string]*vertex{}, log: opts.NewLogger(opts.Console), facts: recordedFacts(opts.Facts)}
	var facts map[string]any
	if opts.Facts != nil {
		facts = opts.Facts.TemplateData()
	}
	var err error
	if e.gen, facts, err = openGenerations(opts, facts); err != nil {
		return nil, err
	}
	e.gen.observe(opts, st)
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
		e.members = &group
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
		v := &vertex{step: s, impl: impl, done: make(chan struct{}), deps: map[string]Step{}}
		e.vertices = append(e.vertices, v)
		e.byName[s.Name] = v
	}
	if err := e.checkClaims(); err != nil {
		return nil, err
	}
	for _, v := range e.vertices {
		for _, d := range v.step.Needs {
			dv := e.byName[d]
			v.needs = append(v.needs, dv)
			v.deps[d] = dv.impl
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
func (e *Engine) env(v *vertex, logw io.Writer, logPath string) *Env {
	if logw == nil {
		logw = io.Discard
	}
	return &Env{
		Root:                e.opts.Root,
		StateDir:            e.opts.StateDir,
		RecipeName:          e.opts.Recipe.Name,
		RecipeDir:           e.opts.RecipeDir,
		StepName:            v.step.Name,
		Facts:               e.opts.Facts,
		Profiles:            e.opts.Recipe.Profiles,
		Log:                 e.opts.NewLogger(io.MultiWriter(e.opts.Console, logw)).With("step", v.step.Name),
		Out:                 logw,
		LogPath:             logPath,
		Console:             e.opts.Console,
		IsTerminal:          e.opts.IsTerminal,
		Deps:                v.deps,
		Verify:              e.opts.Verify,
		Force:               contains(e.opts.Force, v.step.Name),
		Offline:             e.opts.Root != "" && e.opts.Root != "/",
		Builtin:             e.opts.Builtin,
		InsecurePermissions: e.opts.InsecurePermissions,
		Generation:          e.generationInfo(),
		Gated:               e.gated(v),
		Replaces:            e.opts.Recipe.Replaces,
		Drain:               e.opts.Drain,
		Undrain:             e.opts.Undrain,
		Nodes:               e.members,
		PythonLock:          e.pythonLock(),
		NetworkRetryFor:     e.opts.Recipe.NetworkRetryFor(),
		NewManager:          e.opts.NewManager,
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

// gated reports whether a selected step that needs v is a Gate: the gate then decides
// whether what n installs is kept.
func (e *Engine) gated(v *vertex) bool {
	for _, o := range e.vertices {
		g, ok := o.impl.(Gate)
		if !ok || !g.Gates() || len(e.opts.Only) > 0 && !contains(e.opts.Only, o.step.Name) {
			continue
		}
		for _, d := range o.needs {
			if d == v {
				return true
			}
		}
	}
	return false
}

// order returns the vertices in a topological order that keeps the file order where it can.
func (e *Engine) order() []*vertex {
	var out []*vertex
	seen := map[*vertex]bool{}
	var visit func(v *vertex)
	visit = func(v *vertex) {
		if seen[v] {
			return
		}
		seen[v] = true
		for _, d := range v.needs {
			visit(d)
		}
		out = append(out, v)
	}
	for _, v := range e.vertices {
		visit(v)
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

// EnvFor returns an Env for calling a step outside a run (the daemon restarting a
// service); its log goes to the console only.
func (e *Engine) EnvFor(name string) *Env {
	v := e.byName[name]
	if v == nil {
		return nil
	}
	return e.env(v, nil, "")
}

// Close releases what the steps hold (a service manager's connection; with the exec
// manager, the server it supervises). Call it when done with the engine.
func (e *Engine) Close() error {
	var first error
	for _, v := range e.vertices {
		if c, ok := v.impl.(io.Closer); ok {
			if err := c.Close(); err != nil && first == nil {
				first = fmt.Errorf("closing step %s: %w", v.step.Name, err)
			}
		}
	}
	return first
}
