package node

import (
	"context"
	"io"
	"io/fs"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// Deps are what the node's operations build their work with: the constructors of a
// command's factory (the command layer's Factory makes them; a test puts fakes in) and
// where the operations write. A nil constructor is the real one, but for LoadRecipe and
// Registry, which every caller gives: the recipe's parser needs the step kinds, and the
// node layer reaches them only through the registry its caller hands it.
type Deps struct {
	// LoadRecipe checks a recipe file's permissions (unless insecure) and parses it with
	// its --set values; required (Recipe.Load says so without it).
	LoadRecipe func(path string, sets []string, insecure bool) (*recipe.Recipe, error)
	// DetectFacts reads the host's GPU facts (gpu.Detect with Getenv when nil).
	DetectFacts func(ctx context.Context) (*gpu.Facts, error)
	// NewEngine builds an engine (engine.New when nil).
	NewEngine func(engine.Options) (*engine.Engine, error)
	// NewCache makes the fleet cache client (cache.New when nil).
	NewCache func(cache.Config, cache.Options) (*cache.Registry, error)
	// NewManager makes the service managers: the one every engine built here hands its
	// service steps, and those remove and gc stop units with (service.New when nil).
	NewManager func(ctx context.Context, opts service.Options) (service.Manager, error)
	// Lock takes a state dir's lock, SharedLock takes it shared (engine.AcquireLock and
	// engine.AcquireSharedLock when nil).
	Lock, SharedLock func(dir string) (*engine.Lock, error)
	// Registry lists the step kinds (required: an engine without it knows no step);
	// Builtin holds the files shipped in the binary.
	Registry engine.Registry
	Builtin  fs.FS
	// Getenv reads the environment (nil: nothing is set).
	Getenv func(string) string
	// Stdout receives what an operation reports (an apply's summary; nil: nothing);
	// Stderr its logs and warnings (nil: nowhere).
	Stdout, Stderr io.Writer
	// Terminal says that Stderr is a terminal (progress is drawn); Journal that it is the
	// systemd journal (each log record names its recipe).
	Terminal, Journal bool
}

func (d *Deps) getenv(k string) string {
	if d.Getenv == nil {
		return ""
	}
	return d.Getenv(k)
}

func (d *Deps) stdout() io.Writer {
	if d.Stdout == nil {
		return io.Discard
	}
	return d.Stdout
}

func (d *Deps) stderr() io.Writer {
	if d.Stderr == nil {
		return io.Discard
	}
	return d.Stderr
}

// detect reads the host's GPU facts, unmapped.
func (d *Deps) detect(ctx context.Context) (*gpu.Facts, error) {
	if d.DetectFacts == nil {
		return gpu.Detect(ctx, d.getenv)
	}
	return d.DetectFacts(ctx)
}

// Facts reads the host's GPU facts, its failures mapped to the exit-code contract
// (DetectFacts).
func (d *Deps) Facts(ctx context.Context) (*gpu.Facts, error) {
	return DetectFacts(ctx, d.detect, d.getenv)
}

// engine builds an engine, its service steps' managers made with NewManager (unless opts
// names its own constructor).
func (d *Deps) engine(opts engine.Options) (*engine.Engine, error) {
	if opts.NewManager == nil && d.NewManager != nil {
		opts.NewManager = d.NewManager
	}
	if d.NewEngine == nil {
		return engine.New(opts)
	}
	return d.NewEngine(opts)
}

// lock takes dir's lock.
func (d *Deps) lock(dir string) (*engine.Lock, error) {
	if d.Lock == nil {
		return engine.AcquireLock(dir)
	}
	return d.Lock(dir)
}

// manager makes a service manager.
func (d *Deps) manager(ctx context.Context, opts service.Options) (service.Manager, error) {
	if d.NewManager == nil {
		return service.New(ctx, opts)
	}
	return d.NewManager(ctx, opts)
}

// look finds the commands a recipe requires on the environment's PATH.
func (d *Deps) look() hostcmd.PathLooker {
	return hostcmd.PathLooker{Path: d.getenv("PATH"), Getenv: d.getenv}
}
