package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/node"
)

// parseDaemon parses the daemon's command line into its options: -f repeats, --root is
// refused, the durations must be positive.
func parseDaemon(stdio IO, args []string) (*daemonOptions, error) {
	var o daemonOptions
	fs := newFlags("daemon", stdio)
	o.register(fs, stdio)
	fs.hide("root") // refused below: the daemon watches a running node
	// -f and --recipe repeat here: one daemon watches every recipe of the node.
	for _, name := range []string{"f", "recipe"} {
		fl := fs.Lookup(name)
		fl.Value, fl.Usage = &o.files, "recipe `FILE` (repeatable: one daemon watches every recipe of the node)"
	}
	fs.DurationVar(&o.interval, "interval", time.Minute, "time between checks (driver facts, canary)")
	fs.DurationVar(&o.canaryTimeout, "canary-timeout", 2*time.Minute, "how long the canary case may take")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9477", "serve Prometheus metrics on `ADDR` (empty: none)")
	fs.StringVar(&o.textfile, "textfile", "", "also write the metrics to `FILE` for node_exporter's textfile collector")
	fs.IntVar(&o.failures, "failures-before-restart", 3, "consecutive canary failures before the remediation ladder's next rung (a restart first)")
	fs.IntVar(&o.restarts, "max-restarts", 1, "restarts, the remediation ladder's first rung, before the whole gate and the next profile are tried")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if o.interval <= 0 || o.canaryTimeout <= 0 {
		return nil, fmt.Errorf("%w: --interval and --canary-timeout must be positive", exitcode.ErrUsage)
	}
	if o.root != "" && o.root != "/" {
		return nil, fmt.Errorf("%w: --root %s: the daemon watches a running node, and under --root nothing is started; prepare a root with sglprov apply --root", exitcode.ErrUsage, o.root)
	}
	if len(o.files) == 0 {
		o.files = multi{""} // loading says "give -f RECIPE"
	}
	return &o, nil
}

// daemonRun runs the node's daemon (node.Daemon) over every recipe given.
func daemonRun(ctx context.Context, stdio IO, o *daemonOptions) error {
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
	c := &o.recipeFlags
	newLogger, err := c.newLoggerFunc()
	if err != nil {
		return err
	}
	base, err := c.node(stdio)
	if err != nil {
		return err
	}
	recipes, loaded, err := base.Each(o.files, node.OneStateDir{})
	if err != nil {
		return err
	}
	d := &node.Daemon{StateDir: c.stateDirPath(), Insecure: c.insecure, Deps: stdio.Factory.Deps(stdio),
		MetricsAddr: o.metricsAddr, Textfile: o.textfile,
		Settings: node.WatchSettings{Interval: o.interval, CanaryTimeout: o.canaryTimeout, Failures: o.failures, Restarts: o.restarts,
			Log: newLogger(stdio.Stderr).With("component", "daemon"), Stderr: stdio.Stderr, Terminal: isTerminal(stdio.Stderr)}}
	d.Recipes, d.Loaded = recipes, loaded
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
