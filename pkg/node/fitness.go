package node

import (
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fitness"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// FitnessOptions are the host-fitness checks' options for recipe r on this node (e its
// engine, nil when it could not be built; stateDir the state dir): its service's unit,
// whose own processes on the GPUs are not another server's, and the units of the recipes
// it replaces, when the replacement applies.
func FitnessOptions(e *engine.Engine, r *recipe.Recipe, stateDir string) fitness.Options {
	var replaced []string
	if e != nil && e.ReplacesApplied() {
		// Under the exec manager replaces: is not applied: the replaced servers stay.
		replaced = replacedUnits(r, stateDir)
	}
	return fitness.Options{Unit: serviceUnit(e, r), Replaced: replaced}
}

// serviceUnit returns the systemd unit of the recipe's first service step ("" when it has
// none): its own processes on the GPUs are not another server's.
func serviceUnit(e *engine.Engine, r *recipe.Recipe) string {
	if e == nil {
		return ""
	}
	for _, s := range e.Services() {
		if s.Step.ServiceName() != "" {
			return s.Step.ServiceName()
		}
	}
	return ""
}

// replacedUnits returns the systemd units the recipes r replaces installed, as their state
// records them: a model switch stops them only after the preflight, so their servers on the
// GPUs are expected then.
func replacedUnits(r *recipe.Recipe, stateDir string) []string {
	if len(r.Replaces) == 0 {
		return nil
	}
	states, err := engine.LoadStates(stateDir)
	if err != nil || states == nil {
		return nil
	}
	var out []string
	for _, name := range r.Replaces {
		st := states.Recipes[name]
		if st == nil {
			continue
		}
		for _, o := range st.Owns {
			if o.Kind == engine.OwnedUnit {
				out = append(out, o.Path)
			}
		}
	}
	return out
}
