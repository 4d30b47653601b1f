package node

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// RecipeStates says where each recipe's state lives on the node: the seam between the
// daemon and the node's per-recipe state.
type RecipeStates interface {
	// StateDir is the state dir of recipe r (its name) on a node whose state dir is base,
	// among n recipes.
	StateDir(base string, r *recipe.Recipe, n int) string
}

// OneStateDir is the node's layout: one state dir holds every recipe's records
// (state.json keeps them by recipe), as apply uses it.
type OneStateDir struct{}

// StateDir implements RecipeStates.
func (OneStateDir) StateDir(base string, _ *recipe.Recipe, _ int) string { return base }

// LoadEach loads each recipe file with load, in order; two recipes of one name are bad
// usage (their metrics and state would be one).
func LoadEach(files []string, load func(file string) (*recipe.Recipe, error)) ([]*recipe.Recipe, error) {
	var out []*recipe.Recipe
	seen := map[string]string{}
	for _, f := range files {
		r, err := load(f)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[r.Name]; dup {
			return nil, fmt.Errorf("%w: %s and %s are both recipe %q: give each recipe once", exitcode.ErrUsage, prev, f, r.Name)
		}
		seen[r.Name] = f
		out = append(out, r)
	}
	return out, nil
}

// Each is n for each recipe file of files (LoadEach: one of each name), with the state
// dir states gives it, beside the recipes as loaded; each takes the node through a lease
// of its own and keeps the engine of its last apply (as the daemon's loops do).
func (n *Recipe) Each(files []string, states RecipeStates) ([]*Recipe, []*recipe.Recipe, error) {
	rs, err := LoadEach(files, func(f string) (*recipe.Recipe, error) {
		w := *n
		w.File = f
		return w.Load()
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]*Recipe, len(rs))
	for i, r := range rs {
		w := *n
		w.File, w.StateDir = files[i], states.StateDir(n.StateDir, r, len(rs))
		w.Lease, w.Kept = &Lease{}, &Kept{}
		out[i] = &w
	}
	return out, rs, nil
}
