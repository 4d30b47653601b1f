// Package engine plans and runs a recipe's steps: a DAG of steps with fingerprints, a lock,
// an atomically written state file and a report per run.
package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/hostpath"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// Step is one unit of work of a recipe. The engine skips a step only when its fingerprint
// equals the recorded one and Intact reports its outputs unchanged.
type Step interface {
	// Fingerprint returns the named inputs that decide the step's result, beyond its own
	// recipe text and the vars and facts that text refers to (the engine adds those).
	// Values may be long; the engine digests them. A name is what plan shows when its
	// value changes, e.g. "toolchain.nvcc" or "tree".
	Fingerprint(ctx context.Context, env *Env) (map[string]string, error)
	// Intact reports whether the outputs of an earlier run are still there and unchanged;
	// when they are not, reason names what changed (e.g. "outputs changed: /opt/sglang").
	Intact(ctx context.Context, env *Env) (ok bool, reason string, err error)
	// Run does the work.
	Run(ctx context.Context, env *Env) error
}

// NodeLocal is implemented by steps whose recipe body has fields that differ between
// identical nodes without changing the result (a build's job count): the fingerprint
// leaves them, and the vars only they use, out. Paths are top-level keys ("jobs") or keys
// one mapping down ("env.MAX_JOBS").
type NodeLocal interface {
	NodeLocalFields() []string
}

// CacheSlot is a step's place in the fleet cache for one run: the cache the recipe
// configures and the tag of the step's artifact there (its fingerprint). The engine hands
// it to the steps that use the cache, through the interfaces below; steps of other kinds
// never see the cache.
type CacheSlot struct {
	Cache cache.Cache
	Tag   string
	// looked is plan's own lookup of Tag, when it made one, for Lookup to give again.
	looked *lookup
	// parts are the step's fingerprint parts, for its pinned key (tagPinned).
	parts map[string]string
}

// lookup is one answer of Cache.Lookup.
type lookup struct {
	a   *cache.Artifact
	err error
}

// Lookup returns the artifact tagged Tag, as Cache.Lookup does; in plan, where the engine
// has already asked the cache for the tag, its answer, so that the registry is asked once.
func (s CacheSlot) Lookup(ctx context.Context) (*cache.Artifact, error) {
	if s.looked != nil {
		return s.looked.a, s.looked.err
	}
	return s.Cache.Lookup(ctx, s.Tag)
}

// Restorer is implemented by steps whose outputs can come from the fleet cache instead of
// a run: the artifact tagged slot.Tag. Restore returns its digest, or ok false when the
// cache has none; an error makes the engine run the step and say why.
type Restorer interface {
	Restore(ctx context.Context, env *Env, slot CacheSlot) (artifact string, ok bool, err error)
}

// CachedRunner is implemented by steps whose run itself reads from the fleet cache (a
// download takes its listing and each blob from the registry first, and the rest from the
// origin). With a cache configured the engine calls RunCached in place of Run.
type CachedRunner interface {
	RunCached(ctx context.Context, env *Env, slot CacheSlot) error
}

// Publisher is implemented by steps that push what a successful run made to the fleet
// cache (when slot.Cache.CanPush()), tagged slot.Tag; it returns the artifact's digest. A
// failed push is a warning, never a failed step.
type Publisher interface {
	Publish(ctx context.Context, env *Env, slot CacheSlot) (artifact string, err error)
}

// Gate is implemented by steps that gate the service steps they need (the smoke step):
// a service step that a gate needs installs its unit for this boot only, and keeps it
// when the gate passed.
type Gate interface {
	Gates() bool
}

// isGate reports whether s gates the service steps it needs.
func isGate(s Step) bool {
	g, ok := s.(Gate)
	return ok && g.Gates()
}

// AlwaysRunner is implemented by steps that run on every apply, whatever their
// fingerprint (the smoke gate).
type AlwaysRunner interface {
	AlwaysRun() bool
}

// Converger is implemented by steps whose run only brings the host back to the state their
// recipe text names (the packages step: the listed packages installed). When such a step
// runs again, what the steps that need it read is what it was, so they do not run for its
// sake; they still run for their own reasons (a toolchain version in a build's
// fingerprint). A reinstalled package never costs an hour-long rebuild by itself.
type Converger interface {
	Converges() bool
}

// converges reports whether the step of v is a Converger that converges.
func converges(v *vertex) bool {
	c, ok := v.impl.(Converger)
	return ok && c.Converges()
}

// OfflineSkipper is implemented by steps that do nothing offline (--root), where nothing
// is started (the smoke gate) and nothing may run or be written outside the root (a
// command step, whose program runs on this host; a build that names host paths): plan
// shows them skipped, with OfflineSkip's reason, and apply records them so without
// running them. An empty reason means the step can be rendered under the root and runs.
type OfflineSkipper interface {
	OfflineSkip() string
}

// offlineSkip returns why the step of v does not run under --root ("" when it runs, or
// when this is not an offline run).
func offlineSkip(v *vertex, env *Env) string {
	if !env.Offline {
		return ""
	}
	if os, ok := v.impl.(OfflineSkipper); ok {
		return os.OfflineSkip()
	}
	return ""
}

// Preflighter is implemented by steps that can tell before anything runs whether they can
// succeed on this host: a pinned model revision that the hub says does not exist, a
// download that cannot fit in the free space at its destination. plan calls it for every
// selected step, with the slot a run would get: the fleet cache and the step's fingerprint
// as plan computes it as the tag ("" when that cannot be told yet), or a zero slot without
// a cache, so that a node with the cache and no origin still says what apply would do. The
// lines (the bytes still to fetch and the free space) go under the step, and the error
// carries the exit code (exitcode.ErrHost). need says what the step will still write to one file
// system, so that plan can add up the needs of steps whose folders share one (two
// downloads that each fit and together do not); nil when it is not known.
type Preflighter interface {
	Preflight(ctx context.Context, env *Env, slot CacheSlot) (lines []string, need *DiskNeed, err error)
}

// DiskNeed is what a step will still write to one file system, as its preflight found it.
type DiskNeed struct {
	// FS is the file system's id (the device number of the folder checked); needs with the
	// same FS add up.
	FS uint64
	// Dir is the folder the step's own line names (a download's dest).
	Dir string
	// Need is the bytes still to write; Free the bytes free there.
	Need, Free uint64
}

// FileReader is a step that reads files the recipe names (a patch series and its patches,
// a unit template, a question file). validate calls ReadFiles, which reads them as a run
// would, offline, so that what plan and apply refuse as bad input (a FIFO, a file another
// user owns) is refused there too.
type FileReader interface {
	ReadFiles(env *Env) error
}

// Checker is a step that can refuse bad input without the host: what its Fingerprint or
// Run would refuse from the recipe text alone (a source ref that is a branch, a profile
// the recipe does not define). validate calls Check on any machine; errors wrap exitcode.ErrUsage.
type Checker interface {
	Check(env *Env) error
}

// Kind describes one step kind: how to decode its recipe body and build the step.
type Kind struct {
	// NewSpec returns a pointer to a zero spec value; the recipe body is decoded into it
	// strictly (unknown fields are errors).
	NewSpec func() any
	// New builds the step from a decoded spec whose templates have been rendered.
	New func(name string, spec any) (Step, error)
	// UsesFacts says that a step of this kind always uses the host's GPU facts (the build
	// step's arch list), whether or not the recipe mentions them.
	UsesFacts bool
	// Facts names the facts (as templates name them: "gpu.arch_list") that a step of a kind
	// with UsesFacts reads whether or not its text names them: only they join its
	// generation's key, so a fact it never reads (the driver version, for a build) keeps the
	// generation. Empty with UsesFacts: every recorded fact.
	Facts []string
	// ReadsGeneration says that a step of this kind runs from a generation (a service's
	// unit, a check with its interpreter) but writes nothing into it: it is never a
	// generation step, so its text (a server flag) does not join the generation's key.
	ReadsGeneration bool
	// Warnings, when set, returns what validate warns of in the recipe's steps of this
	// kind, read from the recipe alone (a hub download pinned to a branch), each line naming
	// its step.
	Warnings func(r *recipe.Recipe) []string
}

// Warnings returns what the step kinds warn of in r (Kind.Warnings), kind by kind in the
// order of their names.
func (reg Registry) Warnings(r *recipe.Recipe) []string {
	names := make([]string, 0, len(reg))
	for name := range reg {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		if w := reg[name].Warnings; w != nil {
			out = append(out, w(r)...)
		}
	}
	return out
}

// Registry maps step kind names (the key in a recipe step: "command", "source", ...) to kinds.
type Registry map[string]Kind

// NeedsFacts reports whether running r needs the host's GPU facts: the recipe mentions
// them (recipe.NeedsFacts), or one of its steps is of a kind that always uses them.
func (reg Registry) NeedsFacts(r *recipe.Recipe) bool {
	return r.NeedsFacts() || reg.KindsUseFacts(r)
}

// KindsUseFacts reports whether one of r's steps is of a kind that always uses the host's
// GPU facts.
func (reg Registry) KindsUseFacts(r *recipe.Recipe) bool {
	for _, s := range r.Steps {
		if reg[s.Kind].UsesFacts {
			return true
		}
	}
	return false
}

// Env is what a step sees while it is fingerprinted, checked and run.
type Env struct {
	// Root is the host root every host path is written under ("" or "/" is the real host).
	Root string
	// StateDir is the state directory (already under Root where that applies).
	StateDir string
	// RecipeName is the recipe's name; RecipeDir the folder of the recipe file, against
	// which relative recipe paths (patch series, templates, testdata) and relative host
	// paths in step fields (Path) are resolved.
	RecipeName, RecipeDir string
	// StepName is the step's name in the recipe.
	StepName string
	// Facts are the host's GPU facts (nil when the recipe needs none and none were found).
	Facts *gpu.Facts
	// Profiles are the recipe's backend profiles by name.
	Profiles map[string]recipe.Profile
	// Log is the step's logger: it writes to the console and to the step's log file.
	Log *log.Logger
	// Out receives the raw output of commands the step runs (the step log file).
	Out io.Writer
	// LogPath is the path of the step's log file.
	LogPath string
	// Console is the terminal or pipe the run reports progress to; IsTerminal says which.
	Console    io.Writer
	IsTerminal bool
	// Deps are the built steps this step needs, by name (whether they ran or were skipped).
	Deps map[string]Step
	// DepsRan names the needed steps that ran in this run: their outputs are new, so this
	// step runs too (a service restarts rather than only starting).
	DepsRan []string
	// Verify asks steps to re-check outputs fully (e.g. re-hash downloads).
	Verify bool
	// Force is set when the user asked to run this step even though it would be skipped.
	Force bool
	// Offline is set under --root: nothing is started on the host.
	Offline bool
	// Planned is set while plan asks a Preflighter, when plan says the step would run: a
	// check that only a run needs (a service's programs on its PATH) is made then only.
	// PlannedDeps names the needed steps that plan says run first (what they write is not
	// there yet).
	Planned     bool
	PlannedDeps []string
	// Builtin holds the files shipped in the binary (patches, templates, recipes), read
	// through ReadRecipeFile with the "builtin:" prefix.
	Builtin fs.FS
	// InsecurePermissions accepts recipe files that other users own or can write.
	InsecurePermissions bool
	// Generation is the generation this run builds into and the one that serves (nil when
	// the recipe uses none).
	Generation *GenerationInfo
	// Gated is set when a gate that runs in this run needs this step: what the step
	// installs is kept only once the gate passed (a service step stages its unit).
	Gated bool
	// Replaces names the recipes whose services this recipe's service takes over on the
	// node (recipe replaces:).
	Replaces []string
	// Drain and Undrain run the recipe's drain and undrain hooks (nil: none): a switch
	// drains the node before a candidate answers on the served port and undrains it when
	// what serves at the end passed.
	Drain, Undrain func(ctx context.Context) error
	// Nodes is the recipe's multi-node group, rendered (nil: the service runs on this
	// node alone).
	Nodes *recipe.NodesConfig
	// PythonLock is the recipe's python.lock, resolved against its folder ("" when it has
	// none): the Python (pip install) steps install exactly that lock.
	PythonLock string
	// NetworkRetryFor is the recipe's network.retry_for: how long the steps that reach the
	// network retry a failing request (0: netretry.DefaultBudget).
	NetworkRetryFor time.Duration
	// NewManager makes the service manager (nil: service.New): the engine's
	// Options.NewManager, so that a run, the daemon's rungs and a roll back make their
	// managers through one constructor, which tests replace. Steps ask ServiceManager.
	NewManager func(ctx context.Context, opts service.Options) (service.Manager, error)

	store *Store
	// promoted records the run's generation as serving (Promoted; nil: nothing to record).
	promoted func() error
}

// ServiceManager makes the service manager of kind (service.KindSystemd, the default when
// empty, or service.KindExec) for this env's host: offline under --root, the exec
// manager's files under the state dir; through NewManager when set.
func (e *Env) ServiceManager(ctx context.Context, kind string) (service.Manager, error) {
	opts := service.Options{Kind: kind, Root: e.Root, Offline: e.Offline, StateDir: e.StateDir}
	if e.NewManager != nil {
		return e.NewManager(ctx, opts)
	}
	return service.New(ctx, opts)
}

// Promoted records that a switch just promoted a unit rendered from this env: the unit in
// /etc now runs from the run's generation, so the generation is recorded as passed (it
// serves, "current" and the roots' links flip to it) at once, not only at the end of a run
// that passes; a later step that fails, an interrupt or --only cannot leave it unrecorded
// for a prune to remove while its server reads from it. A no-op without generations.
func (e *Env) Promoted() error {
	if e.promoted == nil {
		return nil
	}
	return e.promoted()
}

// HostPath maps an absolute host path into Root; relative paths are returned as they are.
// Steps map the paths their fields name through Path, which also resolves relative ones.
func (e *Env) HostPath(p string) string {
	return HostPath(e.Root, p)
}

// HostPath maps the absolute path p into root, as systemctl --root does (hostpath.Under).
func HostPath(root, p string) string { return hostpath.Under(root, p) }

// Path is the one rule for a host path a step's field names (a dir, a dest, a file it
// creates or reads): an absolute path is mapped into Root (HostPath, --root); a relative
// one, or "", is made absolute against the recipe's folder, so a recipe behaves the same
// whichever directory sglprov was started from (cloud-init starts it from /).
func (e *Env) Path(p string) string {
	if filepath.IsAbs(p) {
		return e.HostPath(p)
	}
	d := filepath.Join(e.RecipeDir, p)
	if abs, err := filepath.Abs(d); err == nil {
		d = abs
	}
	return d
}

// RecipePath resolves a path named in the recipe against the recipe's folder.
func (e *Env) RecipePath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.RecipeDir, p)
}

// LoadData decodes the data this step recorded in the state on an earlier run into v.
// It reports false when there is none.
func (e *Env) LoadData(v any) bool {
	return e.store.load(e.StepName, v)
}

// SaveData records v (JSON) as this step's data; it is written with the state when the
// step completes.
func (e *Env) SaveData(v any) error {
	return e.store.save(e.StepName, v)
}

// LoadStepData and SaveStepData do the same for another step (a smoke gate recording the
// profile that won for the service step it needs).
func (e *Env) LoadStepData(step string, v any) bool { return e.store.load(step, v) }

// SaveStepData records v as the data of the named step.
func (e *Env) SaveStepData(step string, v any) error { return e.store.save(step, v) }

// FromCache records that the step took its outputs from the fleet cache's artifact with
// this digest: the report says "ok (from cache)" and the state records the digest.
func (e *Env) FromCache(artifact string) {
	e.store.setArtifact(e.StepName, artifact, true)
}

// Detail attaches a value to this step's entry in the run report (smoke verdicts,
// resolved commits, files fetched).
func (e *Env) Detail(key string, v any) {
	e.store.detail(e.StepName, key, v)
}

// StepDetail attaches a value to another step's entry in the run report (a service step
// called by the gate recording the profile it installed, so that the report says what
// the state says).
func (e *Env) StepDetail(step, key string, v any) {
	e.store.detail(step, key, v)
}

// Store holds each step's recorded data and report details for one run; it is safe for
// concurrent use.
type Store struct {
	mu        sync.Mutex
	data      map[string]json.RawMessage
	details   map[string]map[string]any
	artifacts map[string]artifactNote
}

// artifactNote is the fleet cache artifact a step took (fromCache) or published.
type artifactNote struct {
	digest    string
	fromCache bool
}

func (s *Store) setArtifact(step, digest string, fromCache bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.artifacts == nil {
		s.artifacts = map[string]artifactNote{}
	}
	s.artifacts[step] = artifactNote{digest: digest, fromCache: fromCache}
}

func (s *Store) artifact(step string) (artifactNote, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.artifacts[step]
	return a, ok
}

// NewStore returns a store seeded with the data recorded by an earlier run.
func NewStore(data map[string]json.RawMessage) *Store {
	s := &Store{data: map[string]json.RawMessage{}, details: map[string]map[string]any{}}
	for k, v := range data {
		s.data[k] = v
	}
	return s
}

func (s *Store) load(step string, v any) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	raw, ok := s.data[step]
	s.mu.Unlock()
	if !ok || len(raw) == 0 {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}

func (s *Store) save(step string, v any) error {
	if s == nil {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.data[step] = raw
	s.mu.Unlock()
	return nil
}

func (s *Store) detail(step, key string, v any) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.details[step] == nil {
		s.details[step] = map[string]any{}
	}
	s.details[step][key] = v
}

// Data returns the recorded data of one step.
func (s *Store) Data(step string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[step]
}

// Details returns the report details of one step.
func (s *Store) Details(step string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.details[step]
}

// NewTestEnv returns an Env for a step's unit tests: root and state under dir, output to
// out, and a fresh store.
func NewTestEnv(dir string, out io.Writer) *Env {
	if out == nil {
		out = io.Discard
	}
	return &Env{
		Root:     "",
		StateDir: filepath.Join(dir, "state"),
		StepName: "test",
		Log:      log.New(out),
		Out:      out,
		Console:  out,
		Deps:     map[string]Step{},
		store:    NewStore(nil),
	}
}

// Describer is implemented by steps that can say in a line or two what they would do
// (the service's command line with its profile); plan prints it under the step.
type Describer interface {
	Describe(env *Env) []string
}

// KindOf makes a Kind from a step kind's spec type S and its constructor: the recipe body
// decodes into an S, and newStep builds the step from it.
func KindOf[S any, T Step](newStep func(name string, spec S) (T, error)) Kind {
	return Kind{
		NewSpec: func() any { return new(S) },
		New: func(name string, spec any) (Step, error) {
			s, ok := spec.(*S)
			if !ok || s == nil {
				return nil, fmt.Errorf("%w: step %q: spec is %T, want %T", exitcode.ErrUsage, name, spec, new(S))
			}
			st, err := newStep(name, *s)
			if err != nil {
				return nil, err
			}
			return st, nil
		},
	}
}
