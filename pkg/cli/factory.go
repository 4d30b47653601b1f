package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/steps"
)

// Factory builds what a command needs: the parsed recipe, the host's GPU facts, the step
// registry, the engine, the fleet cache client, the service manager and the state dir's
// lock. What a command reads (the recipe, the facts, the registry) is built at most once
// per command; a test puts its own constructors in (as cli/cli's cmdutil.Factory). Main
// makes one per command; an IO without one (a test's) builds everything with the real
// constructors at each use.
type Factory struct {
	// DetectFacts reads the host's GPU facts (gpu.Detect when nil).
	DetectFacts func(ctx context.Context, getenv func(string) string) (*gpu.Facts, error)
	// LoadRecipe parses a recipe file with its --set values (recipe.Load with the
	// registry's step kinds when nil).
	LoadRecipe func(path string, sets []string) (*recipe.Recipe, error)
	// NewEngine builds an engine (engine.New when nil).
	NewEngine func(engine.Options) (*engine.Engine, error)
	// NewCache makes the fleet cache client (cache.New when nil).
	NewCache func(cache.Config, cache.Options) (*cache.Registry, error)
	// NewManager makes the service managers: the one a service step installs and starts
	// its unit with (every engine the factory builds hands it to its steps: apply, plan,
	// the daemon's rungs, roll back) and those remove and gc stop units with (service.New
	// when nil).
	NewManager func(ctx context.Context, opts service.Options) (service.Manager, error)
	// AcquireLock takes the state dir's lock (engine.AcquireLock when nil);
	// AcquireSharedLock takes it shared, as readers do (engine.AcquireSharedLock when nil).
	AcquireLock, AcquireSharedLock func(dir string) (*engine.Lock, error)
	// Fresh reads the facts and the recipe again at every use: the daemon watches them
	// change.
	Fresh bool

	mu        sync.Mutex
	factsDone bool
	facts     *gpu.Facts
	factsErr  error
	recipes   map[string]loadedRecipe
	registry  engine.Registry
}

// loadedRecipe is one recipe file as the factory parsed it.
type loadedRecipe struct {
	r   *recipe.Recipe
	err error
}

// Facts returns the host's GPU facts, read once per command (unless Fresh).
func (f *Factory) Facts(ctx context.Context, getenv func(string) string) (*gpu.Facts, error) {
	if f == nil {
		return gpu.Detect(ctx, getenv)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.factsDone && !f.Fresh {
		return f.facts, f.factsErr
	}
	detect := f.DetectFacts
	if detect == nil {
		detect = gpu.Detect
	}
	f.facts, f.factsErr = detect(ctx, getenv)
	f.factsDone = true
	return f.facts, f.factsErr
}

// Registry returns the step kinds, made once.
func (f *Factory) Registry() engine.Registry {
	if f == nil {
		return steps.Registry()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.registry == nil {
		f.registry = steps.Registry()
	}
	return f.registry
}

// Recipe checks the recipe file's permissions (unless insecure) and parses it with its
// --set values, once per command (unless Fresh); its errors are usage errors (exit 2).
func (f *Factory) Recipe(path string, sets []string, insecure bool) (*recipe.Recipe, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: no recipe: give -f RECIPE", exitcode.ErrUsage)
	}
	key := fmt.Sprintf("%t\x00%s\x00%s", insecure, path, strings.Join(sets, "\x00"))
	if f != nil && !f.Fresh {
		f.mu.Lock()
		l, ok := f.recipes[key]
		f.mu.Unlock()
		if ok {
			return l.r, l.err
		}
	}
	r, err := f.loadRecipe(path, sets, insecure)
	if f != nil && !f.Fresh {
		f.mu.Lock()
		if f.recipes == nil {
			f.recipes = map[string]loadedRecipe{}
		}
		f.recipes[key] = loadedRecipe{r, err}
		f.mu.Unlock()
	}
	return r, err
}

func (f *Factory) loadRecipe(path string, sets []string, insecure bool) (*recipe.Recipe, error) {
	load := func(path string, sets []string) (*recipe.Recipe, error) {
		return recipe.Load(path, steps.Specs(f.Registry()), sets)
	}
	if f != nil && f.LoadRecipe != nil {
		load = f.LoadRecipe
	}
	return node.LoadRecipe(path, sets, insecure, load)
}

// Engine builds an engine whose service steps make their managers through the factory
// (unless opts names its own constructor).
func (f *Factory) Engine(opts engine.Options) (*engine.Engine, error) {
	if opts.NewManager == nil {
		opts.NewManager = f.Manager
	}
	if f == nil || f.NewEngine == nil {
		return engine.New(opts)
	}
	return f.NewEngine(opts)
}

// Cache makes the fleet cache client.
func (f *Factory) Cache(cfg cache.Config, opts cache.Options) (*cache.Registry, error) {
	if f == nil || f.NewCache == nil {
		return cache.New(cfg, opts)
	}
	return f.NewCache(cfg, opts)
}

// Manager makes a service manager.
func (f *Factory) Manager(ctx context.Context, opts service.Options) (service.Manager, error) {
	if f == nil || f.NewManager == nil {
		return service.New(ctx, opts)
	}
	return f.NewManager(ctx, opts)
}

// Lock takes the state dir's lock.
func (f *Factory) Lock(dir string) (*engine.Lock, error) {
	if f == nil || f.AcquireLock == nil {
		return engine.AcquireLock(dir)
	}
	return f.AcquireLock(dir)
}

// SharedLock takes the state dir's lock shared.
func (f *Factory) SharedLock(dir string) (*engine.Lock, error) {
	if f == nil || f.AcquireSharedLock == nil {
		return engine.AcquireSharedLock(dir)
	}
	return f.AcquireSharedLock(dir)
}
