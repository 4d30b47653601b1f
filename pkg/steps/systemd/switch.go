package systemd

import (
	"context"
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// Switch returns the switch of the service to profiles (engine.ServiceStep): each
// candidate rendered and checked (the programs it execs), the replaced recipes' units in
// use, and the port check before a candidate or the restored unit starts. The first
// candidate is restarted even when unchanged when a step it needs ran in this run.
func (s *Step) Switch(ctx context.Context, env *engine.Env, profiles []string) (*switchover.Switch, error) {
	m, err := s.manager(ctx, env)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	restart := s.restart
	s.restart = false
	s.mu.Unlock()
	if len(profiles) == 0 {
		profiles = []string{""}
	}
	var cands []switchover.Candidate
	for i, p := range profiles {
		c := switchover.Candidate{Profile: p, Restart: restart && i == 0}
		if err := s.known(env, p); err != nil {
			c.Err = err
		} else if c.Content, c.Err = s.render(env, p); c.Err == nil {
			c.Err = s.checkNeeds(env, m.Kind(), c.Content)
		}
		cands = append(cands, c)
	}
	replaced, err := s.replacedInUse(ctx, env, m)
	if err != nil {
		return nil, err
	}
	if len(replaced) > 0 {
		env.StepDetail(s.name, "replaced", replaced)
	}
	return &switchover.Switch{
		Manager:    m,
		StateDir:   env.StateDir,
		Unit:       s.spec.Unit,
		Candidates: cands,
		Replaces:   replaced,
		Stage:      s.staging(env),
		Before: func(ctx context.Context, c switchover.Candidate) error {
			if c.Content == nil {
				// The last good unit, about to be restored: its packages and group passed
				// with it; this run's (the candidate's) are not its own. The port only.
				return s.checkPort(env, m, c.Profile)
			}
			return s.beforeStart(ctx, env, m, c.Profile)
		},
		Log: env.Log,
	}, nil
}

// known checks that profile is one of the step's candidates ("" for a step without
// profiles).
func (s *Step) known(env *engine.Env, profile string) error {
	c, err := s.candidates(env)
	if err != nil {
		return err
	}
	found := len(c) == 0 && profile == "" && len(s.spec.Profiles) == 0
	for _, p := range c {
		found = found || p == profile
	}
	if !found {
		return fmt.Errorf("%w: profile %q is not a candidate of %s", exitcode.ErrUsage, profile, s.spec.Unit)
	}
	return nil
}

// Switched records what a switch left serving: the winner becomes the profile tried first
// and the last-known-good one; after a restore the unit runs the last-known-good profile
// again.
func (s *Step) Switched(_ context.Context, env *engine.Env, res *switchover.Result) error {
	rec := s.load(env)
	switch {
	case res.Winner != nil:
		rec.Active, rec.Winner, rec.LastKnownGood = res.WinnerProfile, res.WinnerProfile, res.WinnerProfile
	case res.Restored:
		rec.Active = rec.LastKnownGood
	}
	if len(res.Tried) > 0 {
		env.StepDetail(s.name, "profile", rec.Active)
	}
	return s.save(env, rec)
}

// staging is where the switch gates a candidate before it serves: the recipe's stage,
// else the served port for a recipe with drain hooks (whoever runs the switch: the
// daemon's rungs run on a node its hook already took out) and for a multi-node group (a
// head restarted on promotion would take the joined workers down with it), else a side
// port.
func (s *Step) staging(env *engine.Env) switchover.Staging {
	switch {
	case s.spec.Stage != "":
		return switchover.Staging(s.spec.Stage)
	case env.Nodes != nil || env.Drain != nil:
		return switchover.StageServed
	}
	return switchover.StageSidePort
}
