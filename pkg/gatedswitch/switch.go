// Package gatedswitch switches a service step between profiles with the smoke gate
// judging each candidate, and what comes back when none passes, against its own server
// (RunSwitch); it holds the gate of a worker of a multi-node group, which judges through
// the head (WorkerGate), the wait of a worker's switch for its head (AwaitHead), and the
// gate's config set to judge a service's own server as it runs (OwnServer), and reads
// back the profiles a switch tried as a report records them (ProfilesOf). The smoke step
// kind and the node's daemon rungs both drive a switch through it.
package gatedswitch

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// SwitchGate is the gate a switch runs on each candidate and on what it restores.
type SwitchGate struct {
	// Config is the recipe's gate; ServedModel, ModelPath and Failed are set for each
	// server from its own unit.
	Config gate.Config
	// Run runs one gate (nil: gate.Run); profile names the candidate ("" for what is
	// restored or a service without profiles).
	Run func(ctx context.Context, cfg gate.Config, profile string) (*gate.Result, error)
	// RunServer, when set, runs each gate in place of Run, given the server judged (its
	// unit's own arguments): a worker of a multi-node group (WorkerGate).
	RunServer func(ctx context.Context, cfg gate.Config, srv switchover.Server) (*gate.Result, error)
	// Await, when set, is the switch's wait before a candidate that changes what runs
	// starts (switchover.Switch.Await), given the recipe's gate at the candidate's port: a
	// worker of a multi-node group waits until its head runs the candidate (AwaitHead).
	Await func(ctx context.Context, cfg gate.Config, srv switchover.Server) error
	// Drain and Undrain are the recipe's hooks (nil: none).
	Drain, Undrain switchover.Hook
}

// RunSwitch switches svc to profiles through its switch transaction: each candidate, and
// what comes back when none passes, is gated against its own server (the served model
// name and model path of its own unit; its own unit's failure ends the readiness wait).
// The result is recorded in the service step (Switched) and, when a candidate was
// promoted, env's generation is recorded as serving (Env.Promoted). It returns the result, the
// gate's results in the order they ran, and nil or the switch's error (a
// *switchover.FailedError when no candidate passed).
func RunSwitch(ctx context.Context, env *engine.Env, svc engine.ServiceStep, profiles []string, g SwitchGate) (*switchover.Result, []*gate.Result, error) {
	sw, err := svc.Switch(ctx, env, profiles)
	if err != nil {
		return nil, nil, fmt.Errorf("preparing the switch of %s: %w", svc.ServiceName(), err)
	}
	run := g.Run
	if run == nil {
		run = func(ctx context.Context, cfg gate.Config, _ string) (*gate.Result, error) { return gate.Run(ctx, cfg) }
	}
	var results []*gate.Result
	sw.Gate = func(ctx context.Context, srv switchover.Server) (switchover.Verdict, error) {
		cfg := g.Config
		// The server judged must be the unit's: the model it lists and loaded are the
		// unit's (another server on the port would pass the gate in its place).
		cfg.ServedModel, cfg.ModelPath = srv.ServedModel, srv.ModelPath
		// It is reached where its unit listens (a replaced recipe's unit may use another
		// port than this recipe's URL names).
		cfg.URL = ServerURL(cfg.URL, srv)
		// Its own unit's failure ends the readiness wait.
		cfg.Failed = svc.Failed
		if unit := srv.Unit; unit != svc.ServiceName() {
			cfg.Failed = func(ctx context.Context) (bool, string, error) { return sw.Manager.Failed(ctx, unit) }
		}
		var res *gate.Result
		var err error
		if g.RunServer != nil {
			res, err = g.RunServer(ctx, cfg, srv)
		} else {
			res, err = run(ctx, cfg, srv.Profile)
		}
		if err != nil {
			return switchover.Verdict{}, err
		}
		results = append(results, res)
		return switchover.Verdict{Pass: res.Pass, Summary: res.Summary()}, nil
	}
	sw.Drain, sw.Undrain = g.Drain, g.Undrain
	if g.Await != nil {
		sw.Await = func(ctx context.Context, srv switchover.Server) error {
			cfg := g.Config
			cfg.URL = ServerURL(cfg.URL, srv)
			return g.Await(ctx, cfg, srv)
		}
	}
	// The promoted unit runs from env's generation: it is recorded as serving the moment
	// the unit in /etc changes, before the undrain hook or any cleanup, so that no prune
	// removes it whatever happens next (a kill -9 in the undrain hook, a failed later step).
	sw.Promoted = func(context.Context, switchover.Server) error { return env.Promoted() }
	res, err := sw.Run(ctx)
	if res != nil {
		if rerr := svc.Switched(ctx, env, res); rerr != nil && err == nil {
			err = fmt.Errorf("recording the switch of %s: %w", svc.ServiceName(), rerr)
		}
	}
	return res, results, err
}

// ServerURL is base (the recipe's gate URL) with its host and port replaced by where srv
// listens (its unit's --host and --port); a wildcard host (0.0.0.0, ::) is reached on the
// loopback address of its family. The scheme, credentials and path of base stay; base is
// returned as it is when it does not parse or srv's unit names neither (Listens unset).
func ServerURL(base string, srv switchover.Server) string {
	u, err := url.Parse(base)
	if err != nil || !srv.Listens || srv.Port <= 0 {
		return base
	}
	host := strings.TrimSuffix(strings.TrimPrefix(srv.Host, "["), "]")
	switch host {
	case "":
		host = u.Hostname()
	case "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	u.Host = net.JoinHostPort(host, strconv.Itoa(srv.Port))
	return u.String()
}

// OwnServer returns cfg set to judge svc's own server as it runs (the daemon's whole-gate
// rung): its served model name and model path, reached where its unit listens (an
// engine.ServerReader; else the names under the active profile, at the recipe's URL),
// and its unit's failure ending the readiness wait.
func OwnServer(ctx context.Context, env *engine.Env, svc engine.ServiceStep, cfg gate.Config) (gate.Config, error) {
	cfg.Failed = svc.Failed
	if sr, ok := svc.(engine.ServerReader); ok {
		srv, err := sr.Serving(ctx, env)
		if err != nil {
			return cfg, fmt.Errorf("reading the server %s runs: %w", svc.ServiceName(), err)
		}
		cfg.ServedModel, cfg.ModelPath = srv.ServedModel, srv.ModelPath
		cfg.URL = ServerURL(cfg.URL, srv)
		return cfg, nil
	}
	if sm, ok := svc.(engine.ModelServer); ok {
		name, path, err := sm.ServedModel(env)
		if err != nil {
			return cfg, fmt.Errorf("reading the model %s serves: %w", svc.ServiceName(), err)
		}
		cfg.ServedModel, cfg.ModelPath = name, path
	}
	return cfg, nil
}
