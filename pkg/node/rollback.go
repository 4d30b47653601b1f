package node

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Rollback is the daemon's previous-generation rung (daemon.Generations) for a recipe that
// keeps generations: the newest other generation that passed and is still on disk is put
// back (its unit, rendered into its folder with its kept records), restarted and gated;
// on a pass it is recorded as serving (current link, generations record, state), on a fail
// the unit that served before comes back and the ladder goes on to give up. When no other
// generation passed and the serving one is the first, migrated from a tree built in place
// (moved aside from the recipe's roots), that tree is put back instead (RollBackInPlace).
type Rollback struct {
	Recipe *Recipe
	// To, when set, is the generation to go back to (its key, or a prefix of it that names
	// one generation), instead of the previous one: one that passed its gate, whose step
	// records are kept and whose folder is still on disk (`sglprov rollback --to`).
	To string
}

var _ daemon.Generations = (*Rollback)(nil)

// target is where a roll back goes: an earlier generation (prev), or the trees moved
// aside from the roots (links points the roots back at them).
type target struct {
	store *generation.Store
	prev  string
	links []generation.Link
}

// target returns where to roll back to, or an ErrNotAvailable error saying why there is
// nowhere.
func (g *Rollback) target() (*target, error) {
	r, err := g.Recipe.Load()
	if err != nil {
		return nil, err
	}
	if !r.UsesGenerations() {
		return nil, fmt.Errorf("%w: recipe %s keeps no generations to roll back to", daemon.ErrNotAvailable, r.Name)
	}
	store, err := OpenGenerations(g.Recipe.Root, g.Recipe.StateDir, r)
	if err != nil {
		return nil, fmt.Errorf("opening the generations of %s: %w", r.Name, err)
	}
	if g.To != "" {
		key, err := KeptGeneration(store, g.To)
		if err != nil {
			return nil, err
		}
		return &target{store: store, prev: key}, nil
	}
	prev, err := Previous(store)
	if err == nil {
		return &target{store: store, prev: prev}, nil
	}
	links, lerr := inPlaceLinks(g.Recipe.Root, r, store)
	if lerr != nil {
		return nil, fmt.Errorf("%w: recipe %s keeps %w, and no in-place tree to go back to: %w", daemon.ErrNotAvailable, r.Name, err, lerr)
	}
	return &target{store: store, links: links}, nil
}

// inPlaceLinks returns the links that point recipe r's roots (under the host root) back at
// the trees a migration to generations moved aside from them: each root's link is to
// become ROOT.sglprov-inplace (the node's path of the newest one still there). An error
// says why there are none: nothing was moved aside, no generation serves (the trees serve
// already, or nothing passed), a root has no tree moved aside from it, or the roots have
// no common folder to render the recipe's paths as written.
func inPlaceLinks(root string, r *recipe.Recipe, store *generation.Store) ([]generation.Link, error) {
	if len(store.MovedAside()) == 0 {
		return nil, errors.New("no tree built in place was moved aside from its roots")
	}
	if store.Serving() == "" {
		if store.InPlaceServing() != nil {
			return nil, errors.New("the in-place tree serves already")
		}
		return nil, errors.New("no generation serves")
	}
	if _, ok := r.InPlaceGenerationDir(); !ok {
		return nil, errors.New("its roots lie in different folders: its paths as written cannot be rendered")
	}
	var links []generation.Link
	for _, rt := range r.GenerationRoots() {
		link := engine.HostPath(root, rt.Path)
		a, ok := store.Aside(link)
		if !ok {
			return nil, fmt.Errorf("no tree moved aside from %s is still there", rt.Path)
		}
		suffix, found := strings.CutPrefix(a.Path, link)
		if !found || strings.Contains(suffix, "/") {
			return nil, fmt.Errorf("the tree moved aside from %s is recorded at %s, not beside it", rt.Path, a.Path)
		}
		links = append(links, generation.Link{Path: link, Target: rt.Path + suffix})
	}
	return links, nil
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

// ServesInPlace reports whether the generations record of recipe r says that the tree a
// migration to generations moved aside serves again (a roll back put it back).
func ServesInPlace(root, stateDir string, r *recipe.Recipe) bool {
	if !r.UsesGenerations() {
		return false
	}
	store, err := OpenGenerations(root, stateDir, r)
	return err == nil && store.InPlaceServing() != nil
}

// OpenGenerations opens the generations store of recipe r: its folder on the host (under
// root) and its record in the state dir. The generation the recipe's installed unit runs
// is the serving one, whatever the record says (generation.Store.Observe).
func OpenGenerations(root, stateDir string, r *recipe.Recipe) (*generation.Store, error) {
	store, err := generation.Open(engine.HostPath(root, r.GenerationsDir()),
		engine.GenerationsRecordPath(stateDir, r.Name), r.KeepGenerations())
	if err != nil {
		return nil, err
	}
	if st, err := engine.LoadRecipeState(stateDir, r.Name); err == nil {
		store.Observe(engine.ServingUnitFiles(root, stateDir, st.Owns)...)
	}
	return store, nil
}

// RollBack implements daemon.Generations.
func (g *Rollback) RollBack(ctx context.Context) error {
	n := g.Recipe
	release, err := n.TakeLease()
	if err != nil {
		return err
	}
	defer release()
	to, err := g.target()
	if err != nil {
		return err
	}
	var undo []generation.Link
	if to.links != nil {
		// The roots point at the trees moved aside before anything stops: the unit that
		// serves runs from its generation's own folder, not through the links.
		if undo, err = to.store.Relink(to.links); err != nil {
			return fmt.Errorf("pointing the roots back at the in-place tree: %w", err)
		}
	}
	kept := n.Kept
	if kept == nil {
		// No engine is kept: this one is closed at the end.
		kept = &Kept{}
		defer kept.Set(nil)
	}
	// The engine of the last apply goes (with an exec manager of its own it stops the
	// server that answers wrong; the daemon's shared one leaves it to the switch below).
	kept.Set(nil)
	what := "generation " + generation.Short(to.prev)
	mod := func(o *engine.Options) { o.GenerationKey = to.prev }
	if to.links != nil {
		what = "the in-place tree"
		mod = func(o *engine.Options) { o.InPlace = true }
	}
	e, err := n.Engine(ctx, mod)
	if err != nil {
		return relinkBack(to.store, undo, fmt.Errorf("making the engine of %s: %w", what, err))
	}
	if _, ok := e.Service(); !ok {
		e.Close()
		return relinkBack(to.store, undo, fmt.Errorf("%w: the recipe has no service step to roll back", daemon.ErrNotAvailable))
	}
	cfg, err := n.Gate(ctx, 0)
	if err != nil {
		e.Close()
		return relinkBack(to.store, undo, err)
	}
	// The switch transaction: the previous unit is staged for this boot and gated against
	// its own server; on a pass it is promoted and recorded as serving, on a fail the unit
	// that served (the one a reboot starts) is restarted and gated again with its own
	// names.
	if to.links != nil {
		if err = RollBackInPlace(ctx, e, to.store, cfg, undo); err != nil {
			err = fmt.Errorf("%s: %w", what, err)
		}
	} else if err = RollBack(ctx, e, cfg); err != nil {
		err = fmt.Errorf("%s: %w", what, err)
	}
	// The engine stays: with the exec manager, what serves now is its child.
	kept.Set(e)
	return err
}
