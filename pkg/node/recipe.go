package node

import (
	"context"
	"sync"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
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
}

// Held is the engine of the daemon's last apply, kept open: with the exec manager, what
// serves is its child.
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
