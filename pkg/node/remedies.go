package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
)

// Remedies are the daemon's ladder rungs that need the recipe (daemon.Remedies): the
// whole gate, and the service's next candidate profile, through the engine of the last
// apply (an exec-managed server is its child) or one made for the purpose.
type Remedies struct {
	Recipe *Recipe
	// Timeout is the readiness wait of the whole gate on a running server.
	Timeout time.Duration
}

var _ daemon.Remedies = (*Remedies)(nil)

// Regate runs every case of the recipe's gate against the server as it runs, checking
// that it is the service's own (its served model name and model path): Regate.
func (r *Remedies) Regate(ctx context.Context) error {
	cfg, err := r.Recipe.Gate(ctx, r.Timeout)
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
	return Regate(ctx, own, cfg)
}

// ActiveProfile is the profile the recipe's service runs now.
func (r *Remedies) ActiveProfile(ctx context.Context) string {
	var p string
	_ = r.withService(ctx, func(svc engine.BoundService) error {
		p = svc.Step.Active(svc.Env)
		return nil
	})
	return p
}

// NextProfile installs the service's first candidate profile not in tried, gates it with
// the recipe's own readiness wait (a model loads), and records it as the winner when it
// passes, so that the next apply starts from it (NextProfile).
func (r *Remedies) NextProfile(ctx context.Context, tried []string) (string, error) {
	var profile string
	err := r.withService(ctx, func(svc engine.BoundService) error {
		if NextCandidate(svc, tried) == "" {
			return daemon.ErrNoRung
		}
		cfg, err := r.Recipe.Gate(ctx, 0)
		if err != nil {
			return err
		}
		profile, err = NextProfile(ctx, svc, tried, cfg)
		return err
	})
	return profile, err
}

// withService calls f with the recipe's first service step, through the kept engine when
// there is one, under the node's lock, and records the state when f changed the profile
// it runs (Change). A recipe without a service step has no rung: daemon.ErrNoRung.
func (r *Remedies) withService(ctx context.Context, f func(engine.BoundService) error) error {
	// The rung rewrites the unit and the state: not while an apply holds the lock (the
	// daemon holds it already).
	return r.Recipe.withEngine(ctx, func(e *engine.Engine) error {
		if err := Change(e, f); !errors.Is(err, ErrNoService) {
			return err
		}
		return daemon.ErrNoRung
	})
}

// Restart restarts the recipe's service steps with the unit that serves (rendering
// nothing: the engine's recipe may be one whose gate failed), through the engine of the
// last apply when there is one (an exec-managed server is its child).
func (n *Recipe) Restart(ctx context.Context) error {
	// The restart may drop a staged unit: not while an apply holds the lock (the daemon
	// holds it already).
	return n.withEngine(ctx, func(e *engine.Engine) error {
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
	})
}
