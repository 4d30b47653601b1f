package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	gate "github.com/sglprov/sglprov/pkg/smoke"
	smokestep "github.com/sglprov/sglprov/pkg/steps/smoke"
)

// remedies are the daemon's ladder rungs that need the recipe: the whole gate, and the
// service's next candidate profile, through the engine of the last apply (an exec-managed
// server is its child) or one made for the purpose.
type remedies struct {
	stdio   IO
	c       *common
	held    *heldEngine
	timeout time.Duration // the readiness wait of the whole gate on a running server
}

// gateConfig is the recipe's whole smoke gate (every case), with readiness bounded by
// ready (0: the recipe's own ready_timeout).
func (r *remedies) gateConfig(ctx context.Context, ready time.Duration) (gate.Config, error) {
	return smokeConfig(ctx, r.stdio, smokeOptions{recipe: r.c.recipe, sets: r.c.sets, insecure: r.c.insecure, readyTimeout: ready})
}

// runGate runs cfg and turns a verdict that fails into an error that names the failures.
func runGate(ctx context.Context, cfg gate.Config) error {
	res, err := gate.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if !res.Pass {
		return errors.New(res.Summary())
	}
	return nil
}

// Regate runs every case of the recipe's gate against the server as it runs, checking
// that it is the service's own (its served model name and model path).
func (r *remedies) Regate(ctx context.Context) error {
	cfg, err := r.gateConfig(ctx, r.timeout)
	if err != nil {
		return err
	}
	err = r.withService(ctx, func(svc engine.ServiceStep, env *engine.Env) error {
		cfg, err = smokestep.OwnServer(env, svc, cfg)
		return err
	})
	if err != nil && !errors.Is(err, daemon.ErrNoRung) {
		return err
	}
	return runGate(ctx, cfg)
}

// ActiveProfile is the profile the recipe's service runs now.
func (r *remedies) ActiveProfile(ctx context.Context) string {
	var p string
	_ = r.withService(ctx, func(svc engine.ServiceStep, env *engine.Env) error {
		p = svc.Active(env)
		return nil
	})
	return p
}

// NextProfile installs the service's first candidate profile not in tried, gates it with
// the recipe's own readiness wait (a model loads), and records it as the winner when it
// passes, so that the next apply starts from it.
func (r *remedies) NextProfile(ctx context.Context, tried []string) (string, error) {
	var profile string
	err := r.withService(ctx, func(svc engine.ServiceStep, env *engine.Env) error {
		for _, c := range svc.Candidates(env) {
			if c != "" && !slices.Contains(tried, c) {
				profile = c
				break
			}
		}
		if profile == "" {
			return daemon.ErrNoRung
		}
		cfg, err := r.gateConfig(ctx, 0)
		if err != nil {
			return err
		}
		// The switch transaction: staged for this boot, gated against its own server,
		// promoted on a pass, the unit that served restored and gated again on a fail.
		_, _, err = smokestep.RunSwitch(ctx, env, svc, []string{profile}, smokestep.SwitchGate{Config: cfg})
		return err
	})
	return profile, err
}

// persist writes the state after a rung changed the service through e, so that status,
// node_info and the next apply see the profile it runs.
func persist(e *engine.Engine) error {
	if err := e.SaveState(); err != nil {
		return fmt.Errorf("recording the service's profile: %w", err)
	}
	return nil
}

// withService calls f with the recipe's first service step, through the held engine when
// there is one.
func (r *remedies) withService(ctx context.Context, f func(engine.ServiceStep, *engine.Env) error) error {
	// The rung rewrites the unit and the state: not while an apply holds the lock (the
	// daemon holds it already).
	release, err := r.c.holdNode(r.stdio)
	if err != nil {
		return err
	}
	defer release()
	r.held.mu.Lock()
	defer r.held.mu.Unlock()
	e := r.held.e
	if e == nil {
		quiet := r.stdio
		quiet.Stderr = io.Discard
		if e, _, err = r.c.newEngine(ctx, quiet, nil, nil); err != nil {
			return err
		}
		defer e.Close()
	}
	if s, ok := e.Service(); ok {
		before := s.Step.Active(s.Env)
		err := f(s.Step, s.Env)
		if s.Step.Active(s.Env) != before {
			if perr := persist(e); perr != nil && err == nil {
				err = perr
			}
		}
		return err
	}
	return daemon.ErrNoRung
}
