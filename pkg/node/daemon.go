package node

import (
	"context"
	"sync"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Daemon is the sglprov daemon of a node: every recipe it watches, each in its loop
// (Recipe.Watch), sharing the node's lock, its metrics and its textfile.
type Daemon struct {
	// Recipes are the recipes watched; Loaded each one's recipe, as loaded at the start.
	Recipes []*Recipe
	Loaded  []*recipe.Recipe
	// StateDir is the node's state dir; Insecure accepts one that others can write.
	StateDir string
	Insecure bool
	// Deps take the state dirs' locks (Deps.Lock).
	Deps *Deps
	// MetricsAddr is where the metrics are served ("": nowhere); Textfile the file they are
	// also written to for node_exporter ("": none).
	MetricsAddr, Textfile string
	// Settings are the loops' settings; its Log is the daemon's, to which each loop adds
	// its recipe's name.
	Settings WatchSettings
}

// Run holds the node's lock (and each recipe's state dir's) from start to end, so that an
// apply or a second daemon started beside this one is refused (exit 5) and told the
// daemon's pid, rather than starting a second server whose gate would pass against this
// daemon's; serves the metrics; and runs every recipe's loop until ctx ends. Its error is
// the first loop's.
func (d *Daemon) Run(ctx context.Context) error {
	deps := d.Deps
	if deps == nil {
		deps = &Deps{}
	}
	var base Lease
	unlock, err := base.TakeForLife(d.StateDir, d.Insecure, deps.lock)
	if err != nil {
		return err
	}
	defer unlock()
	// The recipes' applies and rungs share the node's state dir: one at a time.
	var nodeMu sync.Mutex
	for _, n := range d.Recipes {
		if n.Lease == nil {
			n.Lease = &Lease{}
		}
		n.Lease.Mu = &nodeMu
		if n.StateDir == d.StateDir {
			n.Lease.Lock = base.Lock
			continue
		}
		un, err := n.Lease.TakeForLife(n.StateDir, d.Insecure, deps.lock)
		if err != nil {
			return err
		}
		defer un()
	}
	logger := d.Settings.Log
	metrics := daemon.NewMetrics()
	if d.MetricsAddr != "" {
		addr, stop, err := metrics.Serve(d.MetricsAddr)
		if err != nil {
			return err
		}
		defer stop()
		logger.Info("serving metrics", "addr", "http://"+addr.String()+"/metrics")
	}
	var textMu sync.Mutex
	writeTextfile := func() {
		textMu.Lock()
		defer textMu.Unlock()
		if d.Textfile == "" {
			return
		}
		if err := metrics.WriteTextfile(d.Textfile); err != nil {
			logger.Warn("writing metrics textfile", "err", err)
		}
	}
	errs := make(chan error, len(d.Recipes))
	for i, n := range d.Recipes {
		r := d.Loaded[i]
		w := d.Settings
		w.Metrics, w.Log, w.Several, w.AfterCheck = metrics, logger.With("recipe", r.Name), len(d.Recipes) > 1, writeTextfile
		go func() {
			if n.Kept == nil {
				n.Kept = &Kept{}
			}
			errs <- n.Watch(ctx, r, w)
		}()
	}
	var first error
	for range d.Recipes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	writeTextfile() // the last word: every recipe stopped
	return first
}
