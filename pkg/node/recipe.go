package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
	gate "github.com/sglprov/sglprov/pkg/smoke"
)

// Recipe is one recipe on the node as the operations see it: where its state lives, and
// how to build what they need (the recipe, the facts, its engine, its gate, the node's
// lock), each a function the caller supplies: the command layer builds them from its flags
// and its factory, a test from fakes.
type Recipe struct {
	// File is the recipe file; Sets its --set values (an apply's inputs).
	File string
	Sets []string
	// Root is the host root (--root; "" is the host's); StateDir the state dir.
	Root, StateDir string

	// Load parses the recipe file with its --set values.
	Load func() (*recipe.Recipe, error)
	// Facts reads the host's GPU facts.
	Facts func(ctx context.Context) (*gpu.Facts, error)
	// Engine builds the recipe's engine as an apply does (the host checked; a host that
	// falls short is an error), with mod applied to its options (nil: none), logging
	// nowhere.
	Engine func(ctx context.Context, mod func(*engine.Options)) (*engine.Engine, error)
	// Steps builds the recipe's steps only, with facts (nil when it uses none), to ask them:
	// no host checks, no logs.
	Steps func(r *recipe.Recipe, facts *gpu.Facts) (*engine.Engine, error)
	// Apply applies the recipe under the node's lock and hands back its engine, not
	// closed, when one was made (the daemon keeps it in Held).
	Apply func(ctx context.Context) (*engine.Report, *engine.Engine, error)
	// Gate is the recipe's whole smoke gate, readiness bounded by ready (0: the recipe's
	// own ready_timeout).
	Gate func(ctx context.Context, ready time.Duration) (gate.Config, error)
	// Holds is what the command holds of the node beyond one change (nil: nothing, each
	// change takes the state dir's lock); Acquire takes that lock (engine.AcquireLock when
	// nil).
	Holds   *Hold
	Acquire func(dir string) (*engine.Lock, error)
	// Held is the engine of the last apply, kept open (nil: none is kept).
	Held *Held

	// Registry lists the step kinds; Builtin holds the files shipped in the binary;
	// Insecure accepts recipe files that other users own or can write (Options).
	Registry engine.Registry
	Builtin  fs.FS
	Insecure bool
	// Getenv reads the environment (the GPU claims' folder; nil: none is set).
	Getenv func(string) string
	// NewCache makes the fleet cache client (nil: cache.New).
	NewCache func(cache.Config, cache.Options) (*cache.Registry, error)
}

// StepOptions are the engine options that build r's steps with facts (nil when it uses
// none): its folder, the step kinds, the host root, the state dir, the shipped files.
func (n *Recipe) StepOptions(r *recipe.Recipe, facts *gpu.Facts) (engine.Options, error) {
	dir, err := filepath.Abs(filepath.Dir(n.File))
	if err != nil {
		return engine.Options{}, fmt.Errorf("locating recipe: %w", err)
	}
	return engine.Options{Recipe: r, RecipeDir: dir, Registry: n.Registry, Facts: facts, Root: n.Root, StateDir: n.StateDir,
		Builtin: n.Builtin}, nil
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
	getenv := n.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	opts.ClaimsDir = ClaimsDir(getenv, n.Root)
	opts.StateDirsDir = StateDirsDir(getenv, n.Root)
	opts.InsecurePermissions = n.Insecure
	if facts == nil && (n.Root == "" || n.Root == "/") {
		// A host where the GPUs cannot be read (no NVML) has none to claim.
		if f, err := n.Facts(ctx); err == nil && f != nil {
			opts.NodeGPUs = f.IDs()
		}
	}
	newCache := n.NewCache
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

// Held is the engine of the daemon's last apply, kept open until the next apply has run:
// with the exec manager, what serves is the child of its manager (under the daemon a
// kept one, Managers, which the next engine shares).
type Held struct {
	mu sync.Mutex
	e  *engine.Engine
}

// ServerRestarts returns how many times the service manager of the held engine's first
// service step restarted its server after it died, when it counts them.
func (h *Held) ServerRestarts() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.e == nil {
		return 0, false
	}
	return h.e.ServerRestarts()
}

// ServerExit returns the unit of the held engine's first service step and how its server
// last died, when its service manager keeps it.
func (h *Held) ServerExit() (string, service.Exit, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.e == nil {
		return "", service.Exit{}, false
	}
	return h.e.ServerExit()
}

// ServerDeaths is what the held engine's service manager says of its server's deaths
// (daemon.Options.Server): the restarts, and how the server last died.
func (h *Held) ServerDeaths() (daemon.ServerDeaths, bool) {
	n, ok := h.ServerRestarts()
	if !ok {
		return daemon.ServerDeaths{}, false
	}
	s := daemon.ServerDeaths{Restarts: n}
	if unit, x, ok := h.ServerExit(); ok {
		s.Unit, s.PID, s.Exit = unit, x.PID, x.Status
	}
	return s, true
}

// Set closes the engine held (stopping what it supervises) and holds e instead.
func (h *Held) Set(e *engine.Engine) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.e != nil {
		h.e.Close()
	}
	h.e = e
}

// Hold takes the node for a change of what serves (Hold.Take); release gives it back.
func (n *Recipe) Hold() (release func(), err error) {
	h := n.Holds
	if h == nil {
		h = &Hold{}
	}
	return h.Take(n.StateDir, n.Acquire)
}

// withEngine calls f with the held engine, or with one made for the purpose (closed
// after), under the node's lock and with the held engine kept meanwhile.
func (n *Recipe) withEngine(ctx context.Context, f func(*engine.Engine) error) error {
	release, err := n.Hold()
	if err != nil {
		return err
	}
	defer release()
	held := n.Held
	if held == nil {
		held = &Held{}
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	e := held.e
	if e == nil {
		if e, err = n.Engine(ctx, nil); err != nil {
			return err
		}
		defer e.Close()
	}
	return f(e)
}
