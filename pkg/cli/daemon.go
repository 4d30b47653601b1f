package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"charm.land/log/v2"
	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/recipe"
	gate "github.com/sglprov/sglprov/pkg/smoke"
)

func runDaemon(ctx context.Context, stdio IO, args []string) error {
	if stdio.Factory != nil {
		// The daemon watches the host: it reads the facts again at each use.
		stdio.Factory.Fresh = true
	}
	var c common
	var o daemonFlags
	var files multi
	fs := newFlags("daemon", stdio)
	c.register(fs, stdio)
	// -f and --recipe repeat here: one daemon watches every recipe of the node.
	for _, name := range []string{"f", "recipe"} {
		fl := fs.Lookup(name)
		fl.Value, fl.Usage = &files, "recipe `FILE` (repeatable: one daemon watches every recipe of the node)"
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
	if len(files) == 0 {
		files = multi{""} // loadRecipe says "give -f RECIPE"
	}
	watches, err := recipeWatches(&c, files, nodeStates{})
	if err != nil {
		return err
	}
	logger := newLogger(stdio.Stderr).With("component", "daemon")
	// The node's lock, held from start to end (and each recipe's state dir's): an apply or
	// a second daemon started beside this one is refused (exit 5) and told the daemon's
	// pid, rather than starting a second server whose gate would pass against this
	// daemon's.
	base := c
	unlock, err := holdNodeLock(stdio, &base)
	if err != nil {
		return err
	}
	defer unlock()
	// The recipes' applies and rungs share the node's state dir: one at a time.
	var nodeMu sync.Mutex
	for _, w := range watches {
		w.c.nodeMu = &nodeMu
		if w.c.stateDirPath() == base.stateDirPath() {
			w.c.lock = base.lock
			continue
		}
		un, err := holdNodeLock(stdio, &w.c)
		if err != nil {
			return err
		}
		defer un()
	}
	metrics := daemon.NewMetrics()
	if o.metricsAddr != "" {
		addr, stop, err := metrics.Serve(o.metricsAddr)
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
		if err := metricsTextfile(metrics, o.textfile); err != nil {
			logger.Warn("writing metrics textfile", "err", err)
		}
	}
	errs := make(chan error, len(watches))
	for _, w := range watches {
		go func() {
			errs <- watchRecipe(ctx, stdio, w, o, metrics, logger.With("recipe", w.r.Name), len(watches) > 1, writeTextfile)
		}()
	}
	var first error
	for range watches {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	writeTextfile() // the last word: every recipe stopped
	return first
}

// daemonFlags are the daemon's own flags.
type daemonFlags struct {
	interval, canaryTimeout time.Duration
	metricsAddr, textfile   string
	failures, restarts      int
}

// recipeWatch is one recipe the daemon watches, with the common flags it runs under
// (its recipe file and its state dir).
type recipeWatch struct {
	c common
	r *recipe.Recipe
}

// RecipeStates says where each recipe's state lives on the node: the seam between the
// daemon and the node's per-recipe state.
type RecipeStates interface {
	// StateDir is the state dir of recipe r (its name) on a node whose state dir is base,
	// among n recipes.
	StateDir(base string, r *recipe.Recipe, n int) string
}

// nodeStates is the node's layout: one state dir holds every recipe's records
// (state.json keeps them by recipe), as apply uses it.
type nodeStates struct{}

// StateDir implements RecipeStates.
func (nodeStates) StateDir(base string, _ *recipe.Recipe, _ int) string { return base }

// recipeWatches loads each recipe file; two recipes of one name are bad usage (their
// metrics and state would be one).
func recipeWatches(c *common, files []string, states RecipeStates) ([]*recipeWatch, error) {
	var out []*recipeWatch
	seen := map[string]string{}
	for _, f := range files {
		w := &recipeWatch{c: *c}
		w.c.recipe = f
		r, err := w.c.loadRecipe()
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[r.Name]; dup {
			return nil, fmt.Errorf("%w: %s and %s are both recipe %q: give each recipe once", exitcode.ErrUsage, prev, f, r.Name)
		}
		seen[r.Name] = f
		w.r = r
		out = append(out, w)
	}
	for _, w := range out {
		if dir := states.StateDir(c.stateDirPath(), w.r, len(out)); dir != c.stateDirPath() {
			w.c.stateDir = dir
		}
	}
	return out, nil
}

// watchRecipe runs the daemon's loop for one recipe until ctx ends.
func watchRecipe(ctx context.Context, stdio IO, w *recipeWatch, o daemonFlags, metrics *daemon.Metrics, logger *log.Logger, several bool, writeTextfile func()) error {
	c, r := &w.c, w.r
	// The engine of the last apply stays open until the next one, and the daemon's end:
	// a server that the exec manager runs lives as long as the daemon (containers without
	// systemd, the demo); a systemd unit does not depend on it.
	var held heldEngine
	defer held.set(nil)
	notify := func(s string) error { _, err := sddaemon.SdNotify(false, s); return err }
	if several {
		// One STATUS= line for the unit: say whose it is.
		notify = func(s string) error {
			if strings.HasPrefix(s, "STATUS=") {
				s = "STATUS=" + r.Name + ": " + strings.TrimPrefix(s, "STATUS=")
			}
			_, err := sddaemon.SdNotify(false, s)
			return err
		}
	}
	rem := &remedies{stdio: stdio, c: c, held: &held, timeout: o.canaryTimeout}
	group, err := daemonGroup(r, stdio, c, rem)
	if err != nil {
		return err
	}
	opts := daemon.Options{
		Group: group,
		Apply: func(ctx context.Context) (*engine.Report, error) {
			held.set(nil)
			rep, e, err := applyKeep(ctx, stdio, c, nil)
			held.set(e)
			return rep, err
		},
		Canary:                canary(stdio, c, o.canaryTimeout, logger),
		CanaryTimeout:         o.canaryTimeout,
		Remedies:              rem,
		Generations:           &rollback{stdio: stdio, c: c, held: &held},
		RestartService:        restartService(stdio, c, &held),
		Notify:                notify,
		Interval:              o.interval,
		FailuresBeforeRestart: o.failures,
		MaxRestarts:           o.restarts,
		Recipe:                r.Name,
		Reapply:               reloadOnHangup(ctx, c, logger),
		Inputs:                applyInputs(stdio, c),
		Hook:                  daemonHook(stdio, c, logger),
		Metrics:               metrics,
		Log:                   logger,
		AfterCheck: func() {
			// The ladder may have moved the service to another profile since the apply.
			metrics.SetNodeInfo(nodeInfoOf(ctx, stdio, c, r))
			if n, ok := held.serverRestarts(); ok {
				metrics.SetServerRestarts(r.Name, n)
			}
			writeTextfile()
		},
	}
	if r.NeedsFacts() {
		opts.Detect = func(ctx context.Context) (*gpu.Facts, error) { return stdio.Factory.Facts(ctx, stdio.Getenv) }
	}
	if wd, err := sddaemon.SdWatchdogEnabled(false); err == nil && wd > 0 {
		opts.WatchdogInterval = wd / 2
	}
	return daemon.New(opts).Run(ctx)
}

// holdNodeLock takes the state dir's lock for the daemon's whole life, noted as the
// daemon's (engine.NoteDaemon), and keeps it in c for the daemon's applies and rungs.
func holdNodeLock(stdio IO, c *common) (func(), error) {
	dir := c.stateDirPath()
	if err := engine.EnsureStateDir(dir, c.insecure); err != nil {
		return nil, err
	}
	lock, err := stdio.Factory.Lock(dir)
	if err != nil {
		return nil, err
	}
	if err := lock.SetNote(engine.NoteDaemon); err != nil {
		lock.Release()
		return nil, err
	}
	c.lock = lock
	return func() { c.lock = nil; lock.Release() }, nil
}

func metricsTextfile(m *daemon.Metrics, path string) error {
	if path == "" {
		return nil
	}
	return m.WriteTextfile(path)
}

// canary returns the daemon's canary: the first case of the recipe's smoke step, with a
// readiness wait of at most wait (one interval for a server that was serving, the canary
// timeout after a restart) and timeout. While it
// waits it calls notReady after every poll, and logs what it sees at least every 30 s.
func canary(stdio IO, c *common, timeout time.Duration, logger *log.Logger) func(ctx context.Context, notReady func(string), wait time.Duration) (time.Duration, error) {
	return func(ctx context.Context, notReady func(string), readyWait time.Duration) (time.Duration, error) {
		spec, err := recipeSmokeSpec(ctx, stdio, smokeOptions{recipe: c.recipe, sets: c.sets, insecure: c.insecure})
		if err != nil {
			return 0, err
		}
		cfg, err := spec.Config(stdio.Getenv)
		if err != nil {
			return 0, err
		}
		// One request on a serving node: the first case that sends a single prompt, never
		// a load case or an accuracy sweep.
		cfg.Cases = []gate.Case{gate.CanaryCase(cfg.Cases)}
		cfg.ReadyTimeout = min(readyWait, timeout)
		cfg.RequestTimeout = timeout
		var wait *gate.WaitReporter
		if isTerminal(stdio.Stderr) {
			wait = gate.NewWaitReporter(gate.RedactURL(cfg.URL), stdio.Stderr, nil, 0)
		} else {
			url := gate.RedactURL(cfg.URL)
			wait = gate.NewWaitReporter(url, nil, func(_ string, s gate.WaitStatus) {
				logger.Info("canary waiting for the server", "url", url, "seconds", logval.Seconds(s.Elapsed),
					"timeout_seconds", logval.Seconds(s.Timeout), "last", s.Last)
			}, 0)
		}
		defer wait.Stop()
		cfg.Waiting = func(s gate.WaitStatus) {
			wait.Update(s)
			if notReady != nil {
				notReady(s.Last)
			}
		}
		start := time.Now()
		res, err := gate.Run(ctx, cfg)
		lat := time.Since(start)
		if err != nil {
			return lat, err
		}
		if !res.Pass {
			return lat, errors.New(res.Summary())
		}
		if len(res.Cases) > 0 {
			lat = res.Cases[0].Latency
		}
		return lat, nil
	}
}

// reloadOnHangup makes SIGHUP re-read the recipe, as daemons do, never end the daemon: a
// recipe that loads is applied at once (the channel delivers), one that does not is
// logged and the daemon goes on with what it runs.
func reloadOnHangup(ctx context.Context, c *common, logger *log.Logger) <-chan string {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	out := make(chan string, 1)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			if _, err := c.loadRecipe(); err != nil {
				logger.Error("SIGHUP: the recipe does not load; the node keeps what it runs", "recipe_file", c.recipe, "err", err)
				continue
			}
			logger.Info("SIGHUP: the recipe was re-read", "recipe_file", c.recipe)
			select {
			case out <- "recipe re-read (SIGHUP)":
			default: // one is pending already
			}
		}
	}()
	return out
}

// heldEngine is the engine of the daemon's last apply, kept open.
type heldEngine struct {
	mu sync.Mutex
	e  *engine.Engine
}

// serverRestarts returns how many times the service manager of the held engine's first
// service step restarted its server after it died, when it counts them.
func (h *heldEngine) serverRestarts() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.e == nil {
		return 0, false
	}
	return h.e.ServerRestarts()
}

// set closes the engine held (stopping what it supervises) and holds e instead.
func (h *heldEngine) set(e *engine.Engine) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.e != nil {
		h.e.Close()
	}
	h.e = e
}

// restartService restarts the recipe's service steps with the unit that serves (rendering
// nothing: the engine's recipe may be one whose gate failed), through the engine of the
// last apply when there is one (an exec-managed server is its child).
func restartService(stdio IO, c *common, held *heldEngine) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		// The restart may drop a staged unit: not while an apply holds the lock (the daemon
		// holds it already).
		release, err := c.holdNode(stdio)
		if err != nil {
			return err
		}
		defer release()
		held.mu.Lock()
		defer held.mu.Unlock()
		e := held.e
		if e == nil {
			quiet := stdio
			quiet.Stderr = io.Discard
			if e, _, err = c.newEngine(ctx, quiet, nil, nil); err != nil {
				return err
			}
			defer e.Close()
		}
		services := e.Services()
		if len(services) == 0 {
			return errors.New("the recipe has no service step to restart")
		}
		for _, s := range services {
			if err := s.Step.Restart(ctx, s.Env); err != nil {
				return fmt.Errorf("restarting %s: %w", s.Step.ServiceName(), err)
			}
		}
		return nil
	}
}

// applyInputs returns the digest of what an apply reads that a failed switch could be
// waiting on: the recipe file, the --set values and the GPU facts (when the recipe uses
// them). The daemon tries a change whose switch failed again only once it differs.
func applyInputs(stdio IO, c *common) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		h := sha256.New()
		b, err := engine.ReadTrusted(c.recipe, 4<<20)
		if err != nil {
			return "", fmt.Errorf("reading recipe %s: %w", c.recipe, err)
		}
		fmt.Fprintf(h, "%d\x00", len(b))
		h.Write(b)
		for _, kv := range c.sets {
			fmt.Fprintf(h, "set\x00%s\x00", kv)
		}
		r, err := c.loadRecipe()
		if err != nil {
			return "", err
		}
		if r.NeedsFacts() {
			f, err := stdio.Factory.Facts(ctx, stdio.Getenv)
			if err != nil {
				return "", fmt.Errorf("reading the GPU facts: %w", err)
			}
			fb, err := json.Marshal(f.TemplateData())
			if err != nil {
				return "", fmt.Errorf("encoding the GPU facts: %w", err)
			}
			h.Write(fb)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
}
