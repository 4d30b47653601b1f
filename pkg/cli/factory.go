package cli

import (
	"context"
	"sync"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// Factory builds what a command needs of the host: its GPU facts, the state dir's lock
// and the fleet cache client; the facts at most once per command. A test puts its own
// constructors in (as cli/cli's cmdutil.Factory). Main makes one per command; an IO
// without one (a test's) builds everything with the real constructors at each use.
type Factory struct {
	// DetectFacts reads the host's GPU facts (gpu.Detect when nil).
	DetectFacts func(ctx context.Context, getenv func(string) string) (*gpu.Facts, error)
	// NewCache makes the fleet cache client (cache.New when nil).
	NewCache func(cache.Config, cache.Options) (*cache.Registry, error)
	// AcquireLock takes the state dir's lock (engine.AcquireLock when nil).
	AcquireLock func(dir string) (*engine.Lock, error)
	// Fresh reads the facts again at every use: the daemon watches them change.
	Fresh bool

	mu        sync.Mutex
	factsDone bool
	facts     *gpu.Facts
	factsErr  error
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

// Cache makes the fleet cache client.
func (f *Factory) Cache(cfg cache.Config, opts cache.Options) (*cache.Registry, error) {
	if f == nil || f.NewCache == nil {
		return cache.New(cfg, opts)
	}
	return f.NewCache(cfg, opts)
}

// Lock takes the state dir's lock.
func (f *Factory) Lock(dir string) (*engine.Lock, error) {
	if f == nil || f.AcquireLock == nil {
		return engine.AcquireLock(dir)
	}
	return f.AcquireLock(dir)
}

// holdNode takes the node for a change of what serves (an apply, a daemon's rung, a roll
// back): the daemon's in-process mutex, and the state dir's lock unless the command holds
// it already (the daemon, from start to end). release gives back what it took.
func (c *common) holdNode(stdio IO) (release func(), err error) {
	if c.nodeMu != nil {
		c.nodeMu.Lock()
	}
	if c.lock != nil {
		return c.unlockNode, nil
	}
	lock, err := stdio.Factory.Lock(c.stateDirPath())
	if err != nil {
		c.unlockNode()
		return nil, err
	}
	return func() {
		lock.Release()
		c.unlockNode()
	}, nil
}

func (c *common) unlockNode() {
	if c.nodeMu != nil {
		c.nodeMu.Unlock()
	}
}
