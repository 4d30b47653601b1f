package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Recipe is one recipe on the node as the operations see it: its file and --set values,
// where its state lives, how it logs, and the dependencies (Deps) its operations build
// their work with. Its methods are the node's operations: Apply, Plan, Validate,
// Rollback, Remove, GC and the daemon's Watch.
type Recipe struct {
	// File is the recipe file; Sets its --set values (an apply's inputs).
	File string
	Sets []string
	// Root is the host root (--root; "" is the host's); StateDir the state dir.
	Root, StateDir string
	// Insecure accepts recipe files and a state dir that other users own or can write.
	Insecure bool
	// NewLogger makes the logger of the operations' engines (the command's log format
	// and level; nil: logfmt-less text at info).
	NewLogger func(io.Writer) *log.Logger
	// Deps are the constructors and the streams (nil: the real constructors, no output).
	Deps *Deps
	// Lease is what the command holds of the node beyond one change (nil: nothing, each
	// change takes the state dir's lock).
	Lease *Lease
	// Kept is the engine of the last apply, kept open (nil: none is kept).
	Kept *Kept
}

// realDeps are the real constructors, no output: the dependencies of a Recipe given none
// (which can then load no recipe: Deps.LoadRecipe and Deps.Registry are the caller's).
var realDeps = &Deps{}

// deps are n's dependencies (the real constructors when none were given).
func (n *Recipe) deps() *Deps {
	if n.Deps == nil {
		return realDeps
	}
	return n.Deps
}

// newLogger is n's logger maker.
func (n *Recipe) newLogger() func(io.Writer) *log.Logger {
	if n.NewLogger == nil {
		return log.New
	}
	return n.NewLogger
}

// Load checks the recipe file's permissions (unless Insecure) and parses it with its
// --set values.
func (n *Recipe) Load() (*recipe.Recipe, error) {
	d := n.deps()
	if d.LoadRecipe == nil {
		return nil, fmt.Errorf("loading recipe %s: no recipe loader", n.File)
	}
	return d.LoadRecipe(n.File, n.Sets, n.Insecure)
}

// Facts reads the host's GPU facts as they are (no exit-code mapping).
func (n *Recipe) Facts(ctx context.Context) (*gpu.Facts, error) {
	return n.deps().detect(ctx)
}

// Steps builds r's steps only, with facts (nil when it uses none), to ask them: no host
// checks, no logs.
func (n *Recipe) Steps(r *recipe.Recipe, facts *gpu.Facts) (*engine.Engine, error) {
	opts, err := n.StepOptions(r, facts)
	if err != nil {
		return nil, err
	}
	opts.NewLogger = func(io.Writer) *log.Logger { return log.New(io.Discard) }
	return n.deps().engine(opts)
}

// StepOptions are the engine options that build r's steps with facts (nil when it uses
// none): its folder, the step kinds, the host root, the state dir, the shipped files.
func (n *Recipe) StepOptions(r *recipe.Recipe, facts *gpu.Facts) (engine.Options, error) {
	dir, err := filepath.Abs(filepath.Dir(n.File))
	if err != nil {
		return engine.Options{}, fmt.Errorf("locating recipe: %w", err)
	}
	d := n.deps()
	return engine.Options{Recipe: r, RecipeDir: dir, Registry: d.Registry, Facts: facts, Root: n.Root, StateDir: n.StateDir,
		Builtin: d.Builtin}, nil
}

// Options are the engine options of an apply (or plan) of r with facts, beyond how it
// logs and shows progress: StepOptions, the recipe's permissions, the node-wide GPU claims
// (with every GPU of the host for a recipe that loads no facts: its server sees them all),
// the fleet cache of its cache block, and, when the recipe has hooks, the drain around a
// switch of its service. logger logs the cache and the hooks.
func (n *Recipe) Options(ctx context.Context, r *recipe.Recipe, facts *gpu.Facts, logger *log.Logger) (engine.Options, error) {
	opts, err := n.StepOptions(r, facts)
	if err != nil {
		return opts, err
	}
	d := n.deps()
	opts.ClaimsDir = ClaimsDir(d.getenv, n.Root)
	opts.StateDirsDir = StateDirsDir(d.getenv, n.Root)
	opts.InsecurePermissions = n.Insecure
	if facts == nil && (n.Root == "" || n.Root == "/") {
		// A host where the GPUs cannot be read (no NVML) has none to claim.
		if f, err := n.Facts(ctx); err == nil && f != nil {
			opts.NodeGPUs = f.IDs()
		}
	}
	newCache := d.NewCache
	if newCache == nil {
		newCache = cache.New
	}
	if opts.Cache, err = Cache(r, facts, n.StateDir, logger, newCache); err != nil {
		return opts, err
	}
	if r.OnUnhealthy != nil || r.OnHealthy != nil {
		// A switch of the service drains the node before a candidate answers on the
		// served port, and undrains it when what serves at the end passed.
		run := n.Hook(logger.With("recipe", r.Name))
		hook := func(ctx context.Context, name string, h daemon.Health, reason string) error {
			if err := run(ctx, name, h, reason); !errors.Is(err, daemon.ErrNoHook) {
				return err
			}
			return nil // the recipe has the other hook only
		}
		opts.Drain = func(ctx context.Context) error {
			return hook(ctx, daemon.HookUnhealthy, daemon.Degraded, "switching "+r.Name+": a candidate is about to answer on the served port")
		}
		opts.Undrain = func(ctx context.Context) error { return hook(ctx, daemon.HookHealthy, daemon.Healthy, "") }
	}
	return opts, nil
}

// Kept is the engine of the daemon's last apply, kept open until the next apply has run:
// with the exec manager, what serves is the child of its manager (under the daemon a
// shared one, Managers, which the next engine shares).
type Kept struct {
	mu sync.Mutex
	e  *engine.Engine
}

// ServerDeaths is what the kept engine's service manager says of its server's deaths
// (daemon.Options.Server): the restarts of its first service step's server, and how that
// server last died, when the manager counts them; both read from one engine.
func (k *Kept) ServerDeaths() (daemon.ServerDeaths, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.e == nil {
		return daemon.ServerDeaths{}, false
	}
	n, ok := k.e.ServerRestarts()
	if !ok {
		return daemon.ServerDeaths{}, false
	}
	s := daemon.ServerDeaths{Restarts: n}
	if unit, x, ok := k.e.ServerExit(); ok {
		s.Unit, s.PID, s.Exit = unit, x.PID, x.Status
	}
	return s, true
}

// Set closes the engine kept (stopping what it supervises) and keeps e instead.
func (k *Kept) Set(e *engine.Engine) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.e != nil {
		k.e.Close()
	}
	k.e = e
}

// TakeLease takes the node for a change of what serves (Lease.Take); release gives it
// back.
func (n *Recipe) TakeLease() (release func(), err error) {
	l := n.Lease
	if l == nil {
		l = &Lease{}
	}
	return l.Take(n.StateDir, n.deps().lock)
}

// withEngine calls f with the kept engine, or with one made for the purpose (closed
// after), under the node's lease and the kept engine untouched meanwhile.
func (n *Recipe) withEngine(ctx context.Context, f func(*engine.Engine) error) error {
	release, err := n.TakeLease()
	if err != nil {
		return err
	}
	defer release()
	kept := n.Kept
	if kept == nil {
		kept = &Kept{}
	}
	kept.mu.Lock()
	defer kept.mu.Unlock()
	e := kept.e
	if e == nil {
		if e, err = n.Engine(ctx, nil); err != nil {
			return err
		}
		defer e.Close()
	}
	return f(e)
}
