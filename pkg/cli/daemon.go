package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
)

func runDaemon(ctx context.Context, stdio IO, args []string) error {
	if stdio.Factory == nil {
		stdio.Factory = &Factory{}
	}
	// The daemon watches the host: it reads the facts and the recipes again at each use.
	stdio.Factory.Fresh = true
	// Its engines share their exec managers for its whole life: a server the exec manager
	// runs is stopped when the daemon ends, not when one apply's engine is let go.
	managers := &node.Managers{New: stdio.Factory.NewManager}
	stdio.Factory.NewManager = managers.Manager
	defer managers.Close()
	var o daemonOptions
	fs := newFlags("daemon", stdio)
	o.register(fs, stdio)
	fs.hide("root") // refused below: the daemon watches a running node
	c, files := &o.recipeFlags, &o.files
	// -f and --recipe repeat here: one daemon watches every recipe of the node.
	for _, name := range []string{"f", "recipe"} {
		fl := fs.Lookup(name)
		fl.Value, fl.Usage = files, "recipe `FILE` (repeatable: one daemon watches every recipe of the node)"
	}
	fs.DurationVar(&o.interval, "interval", time.Minute, "time between checks (driver facts, canary)")
	fs.DurationVar(&o.canaryTimeout, "canary-timeout", 2*time.Minute, "how long the canary case may take")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9477", "serve Prometheus metrics on `ADDR` (empty: none)")
	fs.StringVar(&o.textfile, "textfile", "", "also write the metrics to `FILE` for node_exporter's textfile collector")
	fs.IntVar(&o.failures, "failures-before-restart", 3, "consecutive canary failures before the remediation ladder's next rung (a restart first)")
	fs.IntVar(&o.restarts, "max-restarts", 1, "restarts, the remediation ladder's first rung, before the whole gate and the next profile are tried")
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.interval <= 0 || o.canaryTimeout <= 0 {
		return fmt.Errorf("%w: --interval and --canary-timeout must be positive", exitcode.ErrUsage)
	}
	if c.root != "" && c.root != "/" {
		return fmt.Errorf("%w: --root %s: the daemon watches a running node, and under --root nothing is started; prepare a root with sglprov apply --root", exitcode.ErrUsage, c.root)
	}
	newLogger, err := c.newLoggerFunc()
	if err != nil {
		return err
	}
	if len(*files) == 0 {
		*files = multi{""} // loadRecipe says "give -f RECIPE"
	}
	watches, err := recipeWatches(stdio, c, *files, node.OneStateDir{})
	if err != nil {
		return err
	}
	d := &node.Daemon{StateDir: c.stateDirPath(), Insecure: c.insecure, Acquire: stdio.Factory.Lock,
		MetricsAddr: o.metricsAddr, Textfile: o.textfile,
		Watch: node.Watch{Interval: o.interval, CanaryTimeout: o.canaryTimeout, Failures: o.failures, Restarts: o.restarts,
			Log: newLogger(stdio.Stderr).With("component", "daemon"), Stderr: stdio.Stderr, Terminal: isTerminal(stdio.Stderr)}}
	for _, w := range watches {
		d.Recipes = append(d.Recipes, w.c.node(stdio, &node.Hold{}, &node.Held{}))
		d.Loaded = append(d.Loaded, w.r)
	}
	return d.Run(ctx)
}

// daemonOptions are the daemon's flags: the recipe flags (-f repeats) and its own.
type daemonOptions struct {
	recipeFlags
	files                   multi
	interval, canaryTimeout time.Duration
	metricsAddr, textfile   string
	failures, restarts      int
}

// recipeWatch is one recipe the daemon watches, with the recipe flags it runs under
// (its recipe file and its state dir).
type recipeWatch struct {
	c recipeFlags
	r *recipe.Recipe
}

// recipeWatches loads each recipe file (node.LoadEach: one of each name) with the flags
// of c, in the state dir states gives it.
func recipeWatches(stdio IO, c *recipeFlags, files []string, states node.RecipeStates) ([]*recipeWatch, error) {
	rs, err := node.LoadEach(files, func(f string) (*recipe.Recipe, error) {
		w := *c
		w.recipe = f
		return w.loadRecipe(stdio)
	})
	if err != nil {
		return nil, err
	}
	out := make([]*recipeWatch, len(rs))
	for i, r := range rs {
		out[i] = &recipeWatch{c: *c, r: r}
		out[i].c.recipe = files[i]
		if dir := states.StateDir(c.stateDirPath(), r, len(rs)); dir != c.stateDirPath() {
			out[i].c.stateDir = dir
		}
	}
	return out, nil
}
