package cli

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fitness"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// fitnessProblems runs the host-fitness checks for the recipe's service on the detected
// GPUs: the refusals join the preflight's problems (exit 4, every one at once); warnings
// and what could not be checked are printed on stderr and do not stop the run.
func fitnessProblems(stdio IO, facts *gpu.Facts, r *recipe.Recipe, e *engine.Engine, stateDir string) []string {
	if facts == nil || len(facts.GPUs) == 0 {
		return nil
	}
	var replaced []string
	if e != nil && e.ReplacesApplied() {
		// Under the exec manager replaces: is not applied: the replaced servers stay.
		replaced = replacedUnits(r, stateDir)
	}
	res := fitness.Check(facts, r.Requires.GPU, fitness.Options{Unit: serviceUnit(e, r), Replaced: replaced})
	for _, p := range res.Warnings {
		fmt.Fprintf(stdio.Stderr, "warning: host fitness (requires.gpu.%s: warn): %s\n", p.Check, p)
	}
	var out []string
	for _, p := range res.Refusals {
		out = append(out, p.String())
	}
	if len(out) > 0 {
		for _, u := range res.Unchecked {
			fmt.Fprintf(stdio.Stderr, "note: host fitness unchecked: %s\n", u)
		}
	}
	return out
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
