package systemd

import (
	"context"
	"fmt"
	"path/filepath"

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

// othersInUse returns the replaced units that are still active or enabled, each with its
// recipe named, for messages.
func (s *Step) othersInUse(ctx context.Context, env *engine.Env, m service.Manager) ([]string, error) {
	units, err := s.inUse(ctx, env, m)
	var out []string
	for _, u := range units {
		out = append(out, fmt.Sprintf("%s (recipe %s)", u[0], u[1]))
	}
	return out, err
}

// replacedInUse returns the replaced recipes' units that are active or enabled: those a
// switch takes over.
func (s *Step) replacedInUse(ctx context.Context, env *engine.Env, m service.Manager) ([]string, error) {
	units, err := s.inUse(ctx, env, m)
	var out []string
	for _, u := range units {
		out = append(out, u[0])
	}
	return out, err
}

// inUse returns the replaced recipes' units (unit, recipe) that are active or enabled.
func (s *Step) inUse(ctx context.Context, env *engine.Env, m service.Manager) ([][2]string, error) {
	sw, ok := m.(service.Switcher)
	if !ok || len(env.Replaces) == 0 {
		return nil, nil
	}
	units, err := s.replacedUnits(env, m)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, u := range units {
		used, err := sw.InUse(ctx, u[0])
		if err != nil {
			return nil, err
		}
		if used {
			out = append(out, u)
		}
	}
	return out, nil
}

// Owns names the step's unit and its service manager (engine.Owner): sglprov remove
// stops, disables and deletes it through that manager.
func (s *Step) Owns(*engine.Env) []engine.Owned {
	return []engine.Owned{{Kind: engine.OwnedUnit, Path: s.spec.Unit, Manager: s.spec.Manager}}
}
