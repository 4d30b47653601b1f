package systemd

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/service"
)

// AppliesReplaces reports whether the step stops the units of the recipes its recipe
// replaces (engine.Replacer): only the systemd manager can, and only on the live host (not
// under --root); the exec and offline managers leave them running.
func (s *Step) AppliesReplaces(env *engine.Env) bool {
	m := s.spec.Manager
	return len(env.Replaces) > 0 && (m == "" || m == service.KindSystemd) && !env.Offline && (env.Root == "" || env.Root == "/")
}

// replacedUnits returns the units of the recipes env.Replaces names (found by the header
// sglprov writes into every unit it renders), other than this step's own, as "unit
// (recipe R)" pairs.
func (s *Step) replacedUnits(env *engine.Env, m service.Manager) ([][2]string, error) {
	dir := filepath.Dir(m.UnitPath(s.spec.Unit))
	var out [][2]string
	for _, r := range env.Replaces {
		units, err := service.UnitsOfRecipe(dir, r)
		if err != nil {
			return nil, fmt.Errorf("finding the units of replaced recipe %s: %w", r, err)
		}
		for _, u := range units {
			if u != s.spec.Unit {
				out = append(out, [2]string{u, r})
			}
		}
	}
	return out, nil
}

// othersInUse returns the replaced units that are still active or enabled.
func (s *Step) othersInUse(ctx context.Context, env *engine.Env, m service.Manager) ([]string, error) {
	sw, ok := m.(service.Switcher)
	if !ok || len(env.Replaces) == 0 {
		return nil, nil
	}
	units, err := s.replacedUnits(env, m)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, u := range units {
		inUse, err := sw.InUse(ctx, u[0])
		if err != nil {
			return nil, err
		}
		if inUse {
			out = append(out, fmt.Sprintf("%s (recipe %s)", u[0], u[1]))
		}
	}
	return out, nil
}

// replaceOthers stops and disables the replaced recipes' units that are in use, before
// this step's own unit starts (they may hold its port and its GPUs), and remembers them
// for bringBackReplaced. Their records and files stay: a switch back finds them.
func (s *Step) replaceOthers(ctx context.Context, env *engine.Env, m service.Manager) error {
	if len(env.Replaces) == 0 {
		return nil
	}
	sw, ok := m.(service.Switcher)
	if !ok {
		if env.Log != nil {
			env.Log.Warn("this service manager cannot stop the replaced recipes' units; replaces: is not applied", "manager", m.Kind())
		}
		return nil
	}
	units, err := s.replacedUnits(env, m)
	if err != nil {
		return err
	}
	for _, u := range units {
		inUse, err := sw.InUse(ctx, u[0])
		if err != nil {
			return err
		}
		if !inUse {
			continue
		}
		if err := sw.Disable(ctx, u[0]); err != nil {
			return fmt.Errorf("stopping %s of replaced recipe %s: %w", u[0], u[1], err)
		}
		s.mu.Lock()
		s.replaced = append(s.replaced, u[0])
		s.mu.Unlock()
		if env.Log != nil {
			env.Log.Info("stopped and disabled a replaced unit", "unit", u[0], "recipe", u[1], "by", s.spec.Unit)
		}
	}
	s.mu.Lock()
	if len(s.replaced) > 0 {
		env.StepDetail(s.name, "replaced", append([]string(nil), s.replaced...))
	}
	s.mu.Unlock()
	return nil
}

// bringBackReplaced undoes a switch whose gate failed: this step's staged unit is dropped
// and its service stopped, and the replaced units stopped in this run are enabled and
// started again. It reports false when this run replaced nothing.
func (s *Step) bringBackReplaced(ctx context.Context, env *engine.Env, m service.Manager) (bool, error) {
	s.mu.Lock()
	units := s.replaced
	s.replaced, s.restored = nil, ""
	s.mu.Unlock()
	if len(units) == 0 {
		return false, nil
	}
	sw := m.(service.Switcher) // replaced is only set through a Switcher
	if st, ok := m.(service.Stager); ok {
		if _, err := st.Discard(ctx, s.spec.Unit); err != nil {
			return false, fmt.Errorf("dropping the unit that failed: %w", err)
		}
	}
	if err := m.Stop(ctx, s.spec.Unit); err != nil {
		return false, fmt.Errorf("stopping %s, which failed the gate: %w", s.spec.Unit, err)
	}
	for _, u := range units {
		if err := sw.Enable(ctx, u); err != nil {
			return false, fmt.Errorf("starting replaced unit %s again: %w", u, err)
		}
	}
	s.mu.Lock()
	s.restored = "what it replaced (" + strings.Join(units, ", ") + ")"
	s.mu.Unlock()
	env.StepDetail(s.name, "replaced_restored", units)
	return true, nil
}

// Restored names what the last RestoreLastKnownGood brought back when it was not this
// step's own last-known-good unit ("" otherwise).
func (s *Step) Restored() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restored
}

// Owns names the step's unit (engine.Owner): sglprov remove stops, disables and deletes it.
func (s *Step) Owns(*engine.Env) []engine.Owned {
	return []engine.Owned{{Kind: engine.OwnedUnit, Path: s.spec.Unit}}
}
