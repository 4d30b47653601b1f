package cli

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fitness"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// fitnessProblems runs the host-fitness checks for the recipe's service on the detected
// GPUs: the refusals join the preflight's problems (exit 4, every one at once); warnings
// and what could not be checked are printed on stderr and do not stop the run.
func fitnessProblems(stdio IO, facts *gpu.Facts, r *recipe.Recipe, e *engine.Engine, stateDir string) []string {
	if facts == nil || len(facts.GPUs) == 0 {
		return nil
	}
	res := fitness.Check(facts, r.Requires.GPU, node.FitnessOptions(e, r, stateDir))
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
