// Package node is the application layer: the node's operations that the commands and the
// daemon call, as methods of Recipe over one Deps (Apply, Plan, Validate, Rollback, Remove,
// GC, PythonLock, Watch); the lease of the state dir's lock (Lease); the engine of the
// daemon's last apply, kept open (Kept); and the rungs' operations on a service: gate the
// server as it runs, move the service to its next candidate profile, put an earlier
// generation back, and record what a change left serving.
package node

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gatedswitch"
	"github.com/sglprov/sglprov/pkg/generation"
)

// Errors that say an operation has nothing to act on (the daemon's rung is then not
// available, rather than failed).
var (
	// ErrNoService is returned when the recipe has no service step.
	ErrNoService = errors.New("the recipe has no service step")
	// ErrNoCandidate is returned by NextProfile when every candidate profile was tried.
	ErrNoCandidate = errors.New("no candidate profile left to try")
	// ErrNoPrevious is returned by Previous when no earlier generation passed.
	ErrNoPrevious = errors.New("no earlier generation that passed")
)

// Change calls f with e's first service step and records e's state when the profile the
// service runs changed, so that status, node_info and the next apply see it. It returns
// ErrNoService when e has no service step.
func Change(e *engine.Engine, f func(engine.BoundService) error) error {
	svc, ok := e.Service()
	if !ok {
		return ErrNoService
	}
	before := svc.Step.Active(svc.Env)
	err := f(svc)
	if svc.Step.Active(svc.Env) != before {
		if perr := e.SaveState(); perr != nil && err == nil {
			err = fmt.Errorf("recording the service's profile: %w", perr)
		}
	}
	return err
}

// RestartProfile is the profile a restart of svc runs: the active one, else its first
// candidate ("" for a service without profiles).
func RestartProfile(svc engine.BoundService) string {
	if p := svc.Step.Active(svc.Env); p != "" {
		return p
	}
	if cands := svc.Step.Candidates(svc.Env); len(cands) > 0 {
		return cands[0]
	}
	return ""
}

// NextCandidate is svc's first candidate profile not in tried ("" when none is left).
func NextCandidate(svc engine.BoundService, tried []string) string {
	for _, c := range svc.Step.Candidates(svc.Env) {
		if c != "" && !slices.Contains(tried, c) {
			return c
		}
	}
	return ""
}

// Regate runs every case of cfg against svc's server as it runs, where its own unit
// listens, checking that it is the service's own (its served model name and model path);
// svc may be nil (a recipe without a service step: the gate's own URL is judged). A
// verdict that fails is an error that names the failures.
func Regate(ctx context.Context, svc *engine.BoundService, cfg gate.Config) error {
	if svc != nil {
		var err error
		if cfg, err = gatedswitch.OwnServer(ctx, svc.Env, svc.Step, cfg); err != nil {
			return err
		}
	}
	res, err := gate.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if !res.Pass {
		return errors.New(res.Summary())
	}
	return nil
}

// NextProfile switches svc to its first candidate profile not in tried, through the switch
// transaction gated with cfg (staged, gated against its own server, promoted on a pass,
// the unit that served restored on a fail), and returns the profile. ErrNoCandidate when
// every candidate was tried; nothing is touched then.
func NextProfile(ctx context.Context, svc engine.BoundService, tried []string, cfg gate.Config) (string, error) {
	profile := NextCandidate(svc, tried)
	if profile == "" {
		return "", ErrNoCandidate
	}
	_, _, err := gatedswitch.RunSwitch(ctx, svc.Env, svc.Step, []string{profile}, gatedswitch.SwitchGate{Config: cfg})
	return profile, err
}

// UseProfile switches svc to profile, whichever it is among its candidates, through the
// switch transaction gated with cfg, as NextProfile does: a worker of a group follows the
// profile its head runs, judged as the smoke step judges a worker (gatedswitch.WorkerGate).
func UseProfile(ctx context.Context, svc engine.BoundService, profile string, cfg gate.Config) error {
	if !slices.Contains(svc.Step.Candidates(svc.Env), profile) {
		return fmt.Errorf("profile %s is not a candidate of this node's service (candidates: %v)", profile, svc.Step.Candidates(svc.Env))
	}
	_, _, err := gatedswitch.RunSwitch(ctx, svc.Env, svc.Step, []string{profile},
		gatedswitch.SwitchGate{Config: cfg, RunServer: gatedswitch.WorkerGate(svc.Env, svc.Step)})
	return err
}

// Previous is the generation to go back to from store: the last one before the serving
// one that passed its gate. ErrNoPrevious (wrapped, naming the serving one) when none.
func Previous(store *generation.Store) (string, error) {
	if prev := store.Previous(); prev != "" {
		return prev, nil
	}
	serving := "none"
	if k := store.Serving(); k != "" {
		serving = generation.Short(k)
	}
	return "", fmt.Errorf("%w (serving %s)", ErrNoPrevious, serving)
}

// RollBack puts the generation e was made for (engine.Options.GenerationKey) back: its
// service's unit, with the profile it runs, through the switch transaction gated with cfg,
// and on a pass records the generation as serving. On a fail the unit that served is
// restored and gated again.
func RollBack(ctx context.Context, e *engine.Engine, cfg gate.Config) error {
	svc, ok := e.Service()
	if !ok {
		return ErrNoService
	}
	_, _, err := gatedswitch.RunSwitch(ctx, svc.Env, svc.Step, []string{RestartProfile(svc)}, gatedswitch.SwitchGate{Config: cfg})
	if err != nil {
		return err
	}
	if _, err := e.GenerationPassed(); err != nil {
		return fmt.Errorf("recording the generation as serving: %w", err)
	}
	return nil
}

// RollBackInPlace puts back the unit of the tree a migration to generations moved aside: e
// is made with engine.Options.InPlace (the recipe's paths as written) and the roots' links
// already point at the moved-aside trees (store.Relink, which returned undo). Its service's
// unit, with the profile it runs, goes through the switch transaction gated with cfg; on a
// pass store records that the in-place tree serves (no generation does). On a fail the unit
// that served is restored and gated again, and the links are put back with undo.
func RollBackInPlace(ctx context.Context, e *engine.Engine, store *generation.Store, cfg gate.Config, undo []generation.Link) error {
	svc, ok := e.Service()
	if !ok {
		return relinkBack(store, undo, ErrNoService)
	}
	res, _, err := gatedswitch.RunSwitch(ctx, svc.Env, svc.Step, []string{RestartProfile(svc)}, gatedswitch.SwitchGate{Config: cfg})
	if res == nil || res.Winner == nil {
		return relinkBack(store, undo, err)
	}
	// The in-place unit was promoted: the links stay where it reads, whatever else failed.
	if rerr := store.InPlaceServes(); rerr != nil {
		err = errors.Join(err, fmt.Errorf("recording the in-place tree as serving: %w", rerr))
	}
	return err
}

// relinkBack puts the roots' links back as they were (nothing when links is nil) after a
// roll back to the in-place tree that did not pass, and returns err with what went wrong
// doing so.
func relinkBack(store *generation.Store, links []generation.Link, err error) error {
	if links == nil {
		return err
	}
	if _, rerr := store.Relink(links); rerr != nil {
		return errors.Join(err, fmt.Errorf("pointing the roots back at the generation that served: %w", rerr))
	}
	return err
}
