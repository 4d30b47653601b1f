package node

import (
	"context"
	"fmt"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Rollback is the daemon's previous-generation rung (daemon.Generations) for a recipe that
// keeps generations: the newest other generation that passed and is still on disk is put
// back (its unit, rendered into its folder with its kept records), restarted and gated;
// on a pass it is recorded as serving (current link, generations record, state), on a fail
// the unit that served before comes back and the ladder goes on to give up.
type Rollback struct {
	Recipe *Recipe
}

var _ daemon.Generations = (*Rollback)(nil)

// previous returns the generation to go back to, or an ErrNotAvailable error saying why
// there is none.
func (g *Rollback) previous() (string, error) {
	r, err := g.Recipe.Load()
	if err != nil {
		return "", err
	}
	if !r.UsesGenerations() {
		return "", fmt.Errorf("%w: recipe %s keeps no generations to roll back to", daemon.ErrNotAvailable, r.Name)
	}
	store, err := OpenGenerations(g.Recipe.Root, g.Recipe.StateDir, r)
	if err != nil {
		return "", fmt.Errorf("opening the generations of %s: %w", r.Name, err)
	}
	prev, err := Previous(store)
	if err != nil {
		return "", fmt.Errorf("%w: recipe %s keeps %w", daemon.ErrNotAvailable, r.Name, err)
	}
	return prev, nil
}

// ServingGeneration returns the generation that serves recipe r according to its
// generations record ("" when it keeps none or the record cannot be read).
func ServingGeneration(root, stateDir string, r *recipe.Recipe) string {
	if !r.UsesGenerations() {
		return ""
	}
	store, err := OpenGenerations(root, stateDir, r)
	if err != nil {
		return ""
	}
	return store.Serving()
}

// OpenGenerations opens the generations store of recipe r: its folder on the host (under
// root) and its record in the state dir.
func OpenGenerations(root, stateDir string, r *recipe.Recipe) (*generation.Store, error) {
	return generation.Open(engine.HostPath(root, r.GenerationsDir()),
		engine.GenerationsRecordPath(stateDir, r.Name), r.KeepGenerations())
}

// RollBack implements daemon.Generations.
func (g *Rollback) RollBack(ctx context.Context) error {
	n := g.Recipe
	release, err := n.Hold()
	if err != nil {
		return err
	}
	defer release()
	prev, err := g.previous()
	if err != nil {
		return err
	}
	held := n.Held
	if held == nil {
		// No engine is kept: this one is closed at the end.
		held = &Held{}
		defer held.Set(nil)
	}
	// The engine of the last apply goes (with the exec manager it stops the server that
	// answers wrong): the port is the previous generation's now.
	held.Set(nil)
	e, err := n.Engine(ctx, func(o *engine.Options) { o.GenerationKey = prev })
	if err != nil {
		return fmt.Errorf("making the engine of generation %s: %w", generation.Short(prev), err)
	}
	if _, ok := e.Service(); !ok {
		e.Close()
		return fmt.Errorf("%w: the recipe has no service step to roll back", daemon.ErrNotAvailable)
	}
	cfg, err := n.Gate(ctx, 0)
	if err != nil {
		e.Close()
		return err
	}
	// The switch transaction: generation prev's unit is staged for this boot and gated
	// against its own server; on a pass it is promoted and recorded as serving, on a fail
	// the unit that served (the one a reboot starts) is restarted and gated again with its
	// own names.
	if err = RollBack(ctx, e, cfg); err != nil {
		err = fmt.Errorf("generation %s: %w", generation.Short(prev), err)
	}
	// The engine stays: with the exec manager, what serves now is its child.
	held.Set(e)
	return err
}
