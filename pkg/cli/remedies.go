package cli

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/node"
	gate "github.com/sglprov/sglprov/pkg/smoke"
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

// Regate runs every case of the recipe's gate against the server as it runs, checking
// that it is the service's own (its served model name and model path): node.Regate.
func (r *remedies) Regate(ctx context.Context) error {
	cfg, err := r.gateConfig(ctx, r.timeout)
	if err != nil {
		return err
	}
	var own *engine.BoundService
	err = r.withService(ctx, func(svc engine.BoundService) error {
		own = &svc
		return nil
	})
	if err != nil && !errors.Is(err, daemon.ErrNoRung) {
		return err
	}
	return node.Regate(ctx, own, cfg)
}

// ActiveProfile is the profile the recipe's service runs now.
func (r *remedies) ActiveProfile(ctx context.Context) string {
	var p string
	_ = r.withService(ctx, func(svc engine.BoundService) error {
		p = svc.Step.Active(svc.Env)
		return nil
	})
	return p
}

// NextProfile installs the service's first candidate profile not in tried, gates it with
// the recipe's own readiness wait (a model loads), and records it as the winner when it
// passes, so that the next apply starts from it (node.NextProfile).
func (r *remedies) NextProfile(ctx context.Context, tried []string) (string, error) {
	var profile string
	err := r.withService(ctx, func(svc engine.BoundService) error {
		if node.NextCandidate(svc, tried) == "" {
			return daemon.ErrNoRung
		}
		cfg, err := r.gateConfig(ctx, 0)
		if err != nil {
			return err
		}
		profile, err = node.NextProfile(ctx, svc, tried, cfg)
		return err
	})
	return profile, err
}

// withService calls f with the recipe's first service step, through the held engine when
// there is one, under the node's lock, and records the state when f changed the profile
// it runs (node.Change).
func (r *remedies) withService(ctx context.Context, f func(engine.BoundService) error) error {
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
	if err := node.Change(e, f); !errors.Is(err, node.ErrNoService) {
		return err
	}
	return daemon.ErrNoRung
}
