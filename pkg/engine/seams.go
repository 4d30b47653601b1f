package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// What the command layer and the daemon ask of the steps, by the named interfaces of
// service.go rather than by kind names or assertions of their own.

// BoundService is a service step of an engine, with its name and the Env to call it with.
type BoundService struct {
	// Name is the step's name in the recipe.
	Name string
	// Step is the service step.
	Step ServiceStep
	// Env is the Env to call it with outside a run.
	Env *Env
}

// ServedModel returns the name the service serves its model under and the model path,
// under the active profile; ok is false when the step does not know them.
func (b BoundService) ServedModel() (name, path string, ok bool, err error) {
	m, is := b.Step.(ModelServer)
	if !is {
		return "", "", false, nil
	}
	name, path, err = m.ServedModel(b.Env)
	if err != nil {
		return "", "", true, fmt.Errorf("reading the model %s serves: %w", b.Step.ServiceName(), err)
	}
	return name, path, true, nil
}

// Services returns the engine's service steps, in file order.
func (e *Engine) Services() []BoundService {
	var out []BoundService
	for _, v := range e.vertices {
		if svc, ok := v.impl.(ServiceStep); ok {
			out = append(out, BoundService{Name: v.step.Name, Step: svc, Env: e.env(v, nil, "")})
		}
	}
	return out
}

// Service returns the engine's first service step; ok is false when it has none.
func (e *Engine) Service() (svc BoundService, ok bool) {
	if all := e.Services(); len(all) > 0 {
		return all[0], true
	}
	return BoundService{}, false
}

// ServerRestarts returns how many times the service manager of the first service step
// restarted its server after it died, when it counts them.
func (e *Engine) ServerRestarts() (int, bool) {
	for _, s := range e.Services() {
		if c, ok := s.Step.(RestartCounter); ok {
			return c.ServerRestarts()
		}
	}
	return 0, false
}

// ServerExit returns the unit of the first service step that keeps its server's last exit
// (DeathTeller) and that exit; ok is false when none does or its server has not died.
func (e *Engine) ServerExit() (string, service.Exit, bool) {
	for _, s := range e.Services() {
		if c, ok := s.Step.(DeathTeller); ok {
			return c.ServerExit()
		}
	}
	return "", service.Exit{}, false
}

// KnownBad runs each step's known-bad check (KnownBadChecker), the errors joined, each
// naming its step.
func (e *Engine) KnownBad() error {
	var errs []error
	for _, v := range e.vertices {
		if kb, ok := v.impl.(KnownBadChecker); ok {
			if err := kb.KnownBad(e.env(v, nil, "")); err != nil {
				errs = append(errs, fmt.Errorf("step %s: %w", v.step.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ProvidedCommands returns, for each command a step of the recipe would put on the PATH,
// the name of the first such step: a required command it installs is not required before
// the run. A step that can tell what it would install now (Installs: those of its missing
// packages) is asked; a command whose package is installed already is then not excused,
// since the step leaves it as it is. When it cannot tell (no package manager here), every
// command it may install is taken.
func (e *Engine) ProvidedCommands(ctx context.Context) map[string]string {
	out := map[string]string{}
	if e == nil {
		return out
	}
	for _, v := range e.vertices {
		p, ok := v.impl.(CommandInstaller)
		if !ok {
			continue
		}
		cmds, err := p.Installs(ctx, e.env(v, nil, ""))
		if err != nil {
			cmds = p.Provides()
		}
		for _, c := range cmds {
			if out[c] == "" {
				out[c] = v.step.Name
			}
		}
	}
	return out
}

// GiveCommands hands the recipe's requires.commands to each step that checks the commands
// it installs once it has installed them (CommandChecker): a command excused before the
// run because a step installs it is checked after that step.
func (e *Engine) GiveCommands(required recipe.CommandRequirements, look hostcmd.Looker) {
	if e == nil {
		return
	}
	for _, v := range e.vertices {
		if c, ok := v.impl.(CommandChecker); ok {
			c.CheckCommands(required, look)
		}
	}
}

// SourcePin is one source step's URL and the commit it pins.
type SourcePin struct {
	// Step is the step's name; URL its source URL; Commit the commit it pins ("": none).
	Step, URL, Commit string
}

// SourcePins returns the pins of the engine's source steps (SourcePinner), in file order.
func (e *Engine) SourcePins() []SourcePin {
	var out []SourcePin
	for _, v := range e.vertices {
		if p, ok := v.impl.(SourcePinner); ok {
			u, c := p.SourcePin()
			out = append(out, SourcePin{Step: v.step.Name, URL: u, Commit: c})
		}
	}
	return out
}
