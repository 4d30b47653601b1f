package node

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"charm.land/log/v2"
	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// WatchSettings are how the daemon watches one recipe (Recipe.Watch): its loop's settings
// and what it shares with the other recipes' loops.
type WatchSettings struct {
	// Interval is the time between checks; CanaryTimeout how long the canary case may take.
	Interval, CanaryTimeout time.Duration
	// Failures are the consecutive canary failures before the ladder's next rung; Restarts
	// the restarts before the whole gate and the next profile are tried.
	Failures, Restarts int
	// Metrics are the node's metrics, shared by every recipe's loop.
	Metrics *daemon.Metrics
	// Log is the recipe's logger.
	Log *log.Logger
	// Several says that the daemon watches more than one recipe: its STATUS= lines name
	// the recipe.
	Several bool
	// Stderr is where the canary's wait is drawn when Terminal (else it is logged).
	Stderr   io.Writer
	Terminal bool
	// AfterCheck runs after each cycle's checks (the metrics textfile is written).
	AfterCheck func()
}

// Watch runs the daemon's loop for recipe rec (n's, loaded) until ctx ends: applies, the
// canary, the remediation ladder (restart, regate, next profile, previous generation), the
// hooks and the metrics.
func (n *Recipe) Watch(ctx context.Context, rec *recipe.Recipe, w WatchSettings) error {
	r := rec.Name
	// The engine of the last apply stays open until the next one, and the daemon's end:
	// a server that the exec manager runs lives as long as the daemon (containers without
	// systemd, the demo); a systemd unit does not depend on it.
	if n.Kept == nil {
		n.Kept = &Kept{}
	}
	kept := n.Kept
	defer kept.Set(nil)
	notify := func(s string) error { _, err := sddaemon.SdNotify(false, s); return err }
	if w.Several {
		// One STATUS= line for the unit: say whose it is.
		notify = func(s string) error {
			if strings.HasPrefix(s, "STATUS=") {
				s = "STATUS=" + r + ": " + strings.TrimPrefix(s, "STATUS=")
			}
			_, err := sddaemon.SdNotify(false, s)
			return err
		}
	}
	rem := &Remedies{Recipe: n, Timeout: w.CanaryTimeout}
	group, err := n.daemonGroup(rec, rem)
	if err != nil {
		return err
	}
	opts := daemon.Options{
		Group: group,
		Apply: func(ctx context.Context) (*engine.Report, error) {
			// What serves keeps serving while the apply decides; the last apply's engine
			// goes only after. The daemon's engines share their exec managers (Managers),
			// so the new engine sees the server running: an unchanged unit restarts
			// nothing, and a switch compares its candidate with what serves before
			// anything stops.
			rep, e, err := n.Apply(ctx, ApplyOptions{})
			if e != nil {
				kept.Set(e)
			}
			return rep, err
		},
		Canary:                n.Canary(w.CanaryTimeout, w.Log, w.Stderr, w.Terminal),
		CanaryTimeout:         w.CanaryTimeout,
		Remedies:              rem,
		Generations:           &Rollback{Recipe: n},
		RestartService:        n.Restart,
		Notify:                notify,
		Interval:              w.Interval,
		FailuresBeforeRestart: w.Failures,
		MaxRestarts:           w.Restarts,
		Recipe:                r,
		Reapply:               n.ReloadOnHangup(ctx, w.Log, func() { w.Metrics.RecipeReloadFailed(r) }),
		Inputs:                n.Inputs,
		Hook:                  n.Hook(w.Log),
		Metrics:               w.Metrics,
		Server:                kept.ServerDeaths,
		Log:                   w.Log,
		AfterCheck: func() {
			// The ladder may have moved the service to another profile since the apply.
			w.Metrics.SetNodeInfo(n.Info(ctx, rec))
			if w.AfterCheck != nil {
				w.AfterCheck()
			}
		},
	}
	if rec.NeedsFacts() {
		opts.Detect = func(ctx context.Context) (*gpu.Facts, error) { return n.Facts(ctx) }
	}
	if wd, err := sddaemon.SdWatchdogEnabled(false); err == nil && wd > 0 {
		opts.WatchdogInterval = wd / 2
	}
	return daemon.New(opts).Run(ctx)
}

// Canary returns the daemon's canary: the first case of the recipe's smoke gate, with a
// readiness wait of at most wait (one interval for a server that was serving, the canary
// timeout after a restart) and timeout. While it waits it calls notReady after every
// poll, and draws the wait on stderr (terminal) or logs what it sees at least every 30 s.
func (n *Recipe) Canary(timeout time.Duration, logger *log.Logger, stderr io.Writer, terminal bool) func(ctx context.Context, notReady func(string), wait time.Duration) (time.Duration, error) {
	return func(ctx context.Context, notReady func(string), readyWait time.Duration) (time.Duration, error) {
		cfg, err := n.Gate(ctx, 0)
		if err != nil {
			return 0, err
		}
		// One request on a serving node: the first case that sends a single prompt, never
		// a load case or an accuracy sweep.
		cfg.Cases = []gate.Case{gate.CanaryCase(cfg.Cases)}
		cfg.ReadyTimeout = min(readyWait, timeout)
		cfg.RequestTimeout = timeout
		var wait *gate.WaitReporter
		if terminal {
			wait = gate.NewWaitReporter(gate.RedactURL(cfg.URL), stderr, nil, 0)
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

// ReloadOnHangup makes SIGHUP re-read the recipe, as daemons do, never end the daemon: a
// recipe that loads is applied at once (the channel delivers), one that does not is
// logged, counted with failed (nil: not counted), and the daemon goes on with what it runs.
func (n *Recipe) ReloadOnHangup(ctx context.Context, logger *log.Logger, failed func()) <-chan string {
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
			if _, err := n.Load(); err != nil {
				logger.Error("SIGHUP: the recipe does not load; the node keeps what it runs", "recipe_file", n.File, "err", err)
				if failed != nil {
					failed()
				}
				continue
			}
			logger.Info("SIGHUP: the recipe was re-read", "recipe_file", n.File)
			select {
			case out <- "recipe re-read (SIGHUP)":
			default: // one is pending already
			}
		}
	}()
	return out
}
