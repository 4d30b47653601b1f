package systemd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/nccl"
	"github.com/sglprov/sglprov/pkg/portowner"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// Step installs and starts the SGLang server unit. It implements engine.ServiceStep.
//
// The step owns a service manager, made on first use by the Env (Env.ServiceManager: the
// engine's one constructor; under --root: offline).
// With the exec manager the server is a child of this process: the runner must call Close
// when the run (or the daemon) ends, which stops it.
type Step struct {
	name string
	spec Spec
	port int

	// peerFacts gives the host's GPU peer-path facts for the NCCL environment
	// (hostPeerFacts; tests replace it).
	peerFacts func(*engine.Env) nccl.Source
	// lookupPort finds who listens on a port (portowner.Lookup; tests replace it).
	lookupPort func(port int) ([]portowner.Listener, error)
	// groupFacts gives this node's facts about reaching its multi-node group
	// (hostGroupFacts; tests replace it).
	groupFacts func(*engine.Env, multinode.Group) multinode.Facts

	mu  sync.Mutex
	mgr service.Manager
	// restart is set when a step the service needs ran in this run: the gate's switch
	// restarts the service even when its unit is unchanged.
	restart bool
}

var _ engine.ServiceStep = (*Step)(nil)

// New checks spec and builds the step called name.
func New(name string, spec Spec) (*Step, error) {
	port, err := spec.check()
	if err != nil {
		return nil, fmt.Errorf("systemd: %w: %w", exitcode.ErrUsage, err)
	}
	return &Step{name: name, spec: spec, port: port, peerFacts: hostPeerFacts,
		lookupPort: portowner.Lookup, groupFacts: hostGroupFacts}, nil
}

// record is what the step keeps in the state between runs.
type record struct {
	// Winner is the profile that last passed the gate; it is tried first.
	Winner string `json:"winner,omitempty"`
	// Active is the profile the installed unit was rendered with.
	Active string `json:"active,omitempty"`
	// LastKnownGood is the profile of the last-known-good unit.
	LastKnownGood string `json:"last_known_good,omitempty"`
}

func (s *Step) load(env *engine.Env) record {
	var r record
	env.LoadStepData(s.name, &r)
	return r
}

func (s *Step) save(env *engine.Env, r record) error {
	if err := env.SaveStepData(s.name, r); err != nil {
		return fmt.Errorf("recording the service's profile: %w", err)
	}
	return nil
}

// ServerRestarts returns how many times the service manager restarted the server after it
// died since this step last started it, when the manager counts them (the exec
// supervisor).
func (s *Step) ServerRestarts() (int, bool) {
	c, ok := s.mgr.(service.RestartCounter)
	if !ok {
		return 0, false
	}
	return c.Restarts(s.spec.Unit), true
}

// ServerExit returns the unit and how its server's process last ended by itself, when the
// service manager keeps it (the exec supervisor).
func (s *Step) ServerExit() (string, service.Exit, bool) {
	c, ok := s.mgr.(service.RestartCounter)
	if !ok {
		return "", service.Exit{}, false
	}
	x, ok := c.LastExit(s.spec.Unit)
	return s.spec.Unit, x, ok
}

// manager returns the step's service manager, made on first use.
func (s *Step) manager(ctx context.Context, env *engine.Env) (service.Manager, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mgr != nil {
		return s.mgr, nil
	}
	m, err := env.ServiceManager(ctx, s.spec.Manager)
	if err != nil {
		return nil, err
	}
	s.mgr = m
	return m, nil
}

// Close releases the service manager; with the exec manager it stops the server.
func (s *Step) Close() error {
	s.mu.Lock()
	m := s.mgr
	s.mgr = nil
	s.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.Close()
}

// Fingerprint names the candidate profiles (those that match the host and model, in
// recipe order), the template's digest, and a digest of the unit rendered for each
// candidate, which covers the profiles' flags and environment, the GPU count behind --tp,
// the command and every other value.
//
// It does not depend on which candidate won the gate: the engine records a step's
// fingerprint when the step has run, before the smoke step picks the winner, so a
// winner-dependent part would re-run this step on every apply after a fallback. The
// winner is installed through Activate, and Intact compares the installed unit with the
// winner's.
func (s *Step) Fingerprint(_ context.Context, env *engine.Env) (map[string]string, error) {
	_, _, digest, err := s.template(env)
	if err != nil {
		return nil, err
	}
	cands, err := s.matching(env)
	if err != nil {
		return nil, err
	}
	renders := cands
	if len(renders) == 0 {
		renders = []string{""}
	}
	h := sha256.New()
	for _, p := range renders {
		unit, err := s.render(env, p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(unit))
		h.Write(unit)
	}
	return map[string]string{
		"profiles": strings.Join(cands, ","),
		"template": digest,
		"unit":     "sha256:" + hex.EncodeToString(h.Sum(nil)),
	}, nil
}

// Intact reports whether the installed unit is the one that would be rendered now (and,
// offline, enabled), and whether the service runs.
func (s *Step) Intact(ctx context.Context, env *engine.Env) (bool, string, error) {
	p, err := s.pick(env)
	if err != nil {
		return false, "", err
	}
	want, err := s.render(env, p)
	if err != nil {
		return false, "", err
	}
	m, err := s.manager(ctx, env)
	if err != nil {
		return false, "", err
	}
	if st, ok := m.(service.Stager); ok && st.Staged(s.spec.Unit) {
		return false, "a unit staged by a switch whose gate did not finish is in effect (" + s.spec.Unit + ")", nil
	}
	if others, err := s.othersInUse(ctx, env, m); err != nil {
		return false, "", err
	} else if len(others) > 0 {
		return false, "replaced units still in use: " + strings.Join(others, ", "), nil
	}
	path := m.UnitPath(s.spec.Unit)
	have, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, "outputs changed: " + displayPath(env, path) + " (missing)", nil
	case err != nil:
		return false, "", fmt.Errorf("reading unit %q: %w", s.spec.Unit, err)
	case !bytes.Equal(have, want):
		return false, "outputs changed: " + displayPath(env, path), nil
	}
	if off, ok := m.(*service.Offline); ok {
		links, target, err := off.EnableLinks(s.spec.Unit, want)
		if err != nil {
			return false, "", err
		}
		for _, l := range links {
			if t, err := os.Readlink(l); err != nil || t != target {
				return false, "outputs changed: " + displayPath(env, l), nil
			}
		}
		return true, "", nil
	}
	active, sub, err := m.State(ctx, s.spec.Unit)
	if err != nil {
		return false, "", err
	}
	switch active {
	case "active", "activating", "reloading", service.KindOffline:
		return true, "", nil
	}
	return false, fmt.Sprintf("service %s is %s (%s)", s.spec.Unit, active, sub), nil
}

// Run installs the unit with the first candidate profile (the recorded winner when it
// still matches) and starts the service. It restarts the service only when the unit
// changed or a step it needs ran in this run (a rebuilt kernel, new weights: the running
// server still has the old ones): an apply with nothing changed restarts nothing.
//
// When a gate decides on the unit (env.Gated, not offline), Run only renders and checks
// it: the gate's switch transaction (Switch) stages, starts, keeps or restores it.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	p, err := s.pick(env)
	if err != nil {
		return err
	}
	m, err := s.manager(ctx, env)
	if err != nil {
		return err
	}
	if err := s.checkUnit(env, m); err != nil {
		return err
	}
	if err := s.kernelCacheDirs(env, p); err != nil {
		return err
	}
	if env.Gated && m.Kind() != service.KindOffline {
		unit, err := s.render(env, p)
		if err != nil {
			return err
		}
		if err := s.checkNeeds(env, m.Kind(), unit); err != nil {
			return err
		}
		// Another's server on the port is refused now (exit 5), before the gate's switch
		// stops anything; the replaced recipes' units are the switch's to stop.
		replaced, err := s.replacedInUse(ctx, env, m)
		if err != nil {
			return err
		}
		if err := s.beforeStart(ctx, env, m, p, replaced...); err != nil {
			return err
		}
		s.mu.Lock()
		s.restart = len(env.DepsRan) > 0
		s.mu.Unlock()
		env.Detail("unit", displayPath(env, m.UnitPath(s.spec.Unit)))
		env.Detail("profile", p)
		env.Detail("manager", m.Kind())
		have, _ := os.ReadFile(m.UnitPath(s.spec.Unit))
		env.Detail("changed", !bytes.Equal(have, unit))
		env.Detail("switch", "the gate's switch installs it")
		return nil
	}
	changed, err := s.install(ctx, env, p, len(env.DepsRan) > 0, false)
	if err != nil {
		return err
	}
	env.Detail("unit", displayPath(env, m.UnitPath(s.spec.Unit)))
	env.Detail("profile", p)
	env.Detail("manager", m.Kind())
	env.Detail("changed", changed)
	return nil
}

// beforeStart is what is checked before the unit's server starts with profile, by an
// install and before each candidate of a switch: the environment's packages against the
// known-bad combinations (exit 4), the node's place in its multi-node group (a node that
// cannot join is said first: its server would wait in vain) and the port (exit 5; the
// units in also may hold it).
func (s *Step) beforeStart(ctx context.Context, env *engine.Env, m service.Manager, profile string, also ...string) error {
	if err := s.checkKnownBad(env, profile); err != nil {
		return err
	}
	if err := s.checkGroup(ctx, env, m, profile); err != nil {
		return err
	}
	return s.checkPort(env, m, profile, also...)
}

// install renders the unit for profile, installs it and starts the service: restarting it
// when the unit changed or restart is set. It records profile as the active one. With
// stage set (a gate decides whether the unit is kept) and a manager that can, the unit is
// staged for this boot only (service.Stager).
func (s *Step) install(ctx context.Context, env *engine.Env, profile string, restart, stage bool) (bool, error) {
	unit, err := s.render(env, profile)
	if err != nil {
		return false, err
	}
	m, err := s.manager(ctx, env)
	if err != nil {
		return false, err
	}
	if env.Offline {
		// Rendered for another node, whose own PATH decides; plan lists them unchecked.
		if n := s.needs(); len(n) > 0 {
			env.Log.Info("under --root: the programs the server execs are not checked here", "needs", strings.Join(n, ","))
		}
	} else if err := s.checkNeeds(env, m.Kind(), unit); err != nil {
		return false, err
	}
	if err := s.beforeStart(ctx, env, m, profile); err != nil {
		return false, err
	}
	var changed bool
	if st, ok := m.(service.Stager); ok && stage {
		// The gate decides whether this unit is kept: until it passes, the unit is in
		// effect for this boot only, and a reboot starts the last one that passed.
		changed, err = st.Stage(ctx, s.spec.Unit, unit)
	} else {
		changed, err = m.Install(ctx, s.spec.Unit, unit)
	}
	if err != nil {
		return false, err
	}
	if changed || restart {
		err = m.Restart(ctx, s.spec.Unit)
	} else {
		err = m.Start(ctx, s.spec.Unit)
	}
	if err != nil {
		return changed, err
	}
	rec := s.load(env)
	rec.Active = profile
	if err := s.save(env, rec); err != nil {
		return changed, err
	}
	// The gate may install another profile through this step: the report then names
	// the profile the state records, not the one the step itself installed first.
	env.StepDetail(s.name, "profile", profile)
	if env.Log != nil {
		env.Log.Info("service installed", "unit", s.spec.Unit, "profile", profile, "manager", m.Kind(),
			"changed", changed, "path", displayPath(env, m.UnitPath(s.spec.Unit)))
	}
	return changed, nil
}

// Candidates returns the profiles that match the host and model, the recorded winner
// first; nil when the step names no profiles or none matches.
func (s *Step) Candidates(env *engine.Env) []string {
	c, err := s.candidates(env)
	if err != nil {
		return nil
	}
	return c
}

// Active returns the profile the installed unit was rendered with.
func (s *Step) Active(env *engine.Env) string {
	return s.load(env).Active
}

// Restart restarts the service with the unit that serves (the daemon's restart rung): the
// persistent unit, or under the exec manager the last one that passed, never a unit
// rendered from the step's recipe, which no gate has passed. The active profile stays.
func (s *Step) Restart(ctx context.Context, env *engine.Env) error {
	m, err := s.manager(ctx, env)
	if err != nil {
		return err
	}
	return switchover.RestartServing(ctx, m, env.StateDir, s.spec.Unit)
}

// Failed reports whether the service has failed, with its last log lines. Before the step
// has made its manager (nothing installed or checked in this run) it reports false.
func (s *Step) Failed(ctx context.Context) (bool, string, error) {
	s.mu.Lock()
	m := s.mgr
	s.mu.Unlock()
	if m == nil {
		return false, "", nil
	}
	return m.Failed(ctx, s.spec.Unit)
}
