package systemd

import (
	"context"
	"errors"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/service"
)

// Preflight tells plan what apply would find at the service step before anything runs: a
// profile that matches the host (none is exit 4; none matching the step's own
// --quantization is the recipe's fault, exit 2), a unit that renders, and, when the step
// would run, the programs the server execs (needs_commands) on the rendered unit's PATH.
// A missing program refuses the plan with exit 4, as apply would refuse the start, unless a
// step the service needs runs first (what it installs is not there yet; apply checks again
// before the start). Under --root they are listed as unchecked: the node's PATH decides.
func (s *Step) Preflight(_ context.Context, env *engine.Env, _ engine.CacheSlot) ([]string, *engine.DiskNeed, error) {
	p, err := s.pick(env)
	if err != nil {
		return nil, nil, err
	}
	unit, err := s.render(env, p)
	if err != nil {
		return nil, nil, err
	}
	needs := s.needs()
	if len(needs) == 0 || !env.Planned {
		return nil, nil, nil
	}
	if env.Offline {
		return []string{"needs on PATH (" + strings.Join(needs, ", ") + "): unchecked (--root renders for another node, whose own PATH decides)"}, nil, nil
	}
	kind := service.KindSystemd
	if s.spec.Manager == service.KindExec {
		kind = service.KindExec
	}
	err = s.checkNeeds(env, kind, unit)
	if err == nil || !errors.Is(err, exitcode.ErrHost) {
		return nil, nil, err
	}
	if len(env.PlannedDeps) > 0 {
		return []string{"not found now, checked again before the start, after " + strings.Join(env.PlannedDeps, ", ") + " ran: " + exitcode.Message(err)}, nil, nil
	}
	return nil, nil, err
}
