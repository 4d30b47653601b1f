package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/sglprov/sglprov/pkg/reclaim"
	"github.com/sglprov/sglprov/pkg/service"
)

// ErrNoGenerations is returned by Rollback for a recipe that keeps no generations: there
// is nothing to go back to.
var ErrNoGenerations = errors.New("the recipe keeps no generations")

// RolledBack is what a roll back left serving: the generation that served before, the one
// that serves now ("" when the in-place tree does), and whether the in-place tree serves.
type RolledBack struct {
	Recipe        string
	Before, After string
	InPlace       bool
}

// Rollback puts the recipe's previous generation that passed its gate back in service (or
// the one to names: its key or a prefix of it), gated as a switch is: on a pass it serves
// and is recorded as serving; on a fail the generation that served before serves again
// (Rollback.RollBack). ErrNoGenerations (wrapped, naming the recipe) for a recipe that
// keeps none.
func (n *Recipe) Rollback(ctx context.Context, to string) (RolledBack, error) {
	r, err := n.Load()
	if err != nil {
		return RolledBack{}, err
	}
	out := RolledBack{Recipe: r.Name}
	if !r.UsesGenerations() {
		return out, fmt.Errorf("%w: recipe %s", ErrNoGenerations, r.Name)
	}
	out.Before = ServingGeneration(n.Root, n.StateDir, r)
	if err := (&Rollback{Recipe: n, To: to}).RollBack(ctx); err != nil {
		return out, fmt.Errorf("rolling back %s: %w", r.Name, err)
	}
	out.After = ServingGeneration(n.Root, n.StateDir, r)
	out.InPlace = out.After == "" && ServesInPlace(n.Root, n.StateDir, r)
	return out, nil
}

// Remove takes the recipe off the node: its units, generations and records, and with
// weights the files its downloads wrote; what another recipe on the node also uses is
// kept; dryRun says what would go and changes nothing (reclaim.Remove). It reports on
// Deps.Stdout.
func (n *Recipe) Remove(ctx context.Context, weights, dryRun bool) error {
	r, err := n.Load()
	if err != nil {
		return err
	}
	return reclaim.Remove(ctx, reclaim.RemoveOptions{StateDir: n.StateDir, Root: n.Root, Recipe: r.Name,
		Weights: weights, DryRun: dryRun, Out: n.deps().stdout(), NewManager: n.managers(),
		Node: Scope(n.deps().getenv, n.Root)})
}

// GC frees what no recipe on the node needs: generations beyond the kept ones, the part
// files of unfinished downloads, and what removed recipes left where no recipe uses it now;
// dryRun says what would be freed (reclaim.GC). It reports on Deps.Stdout. n needs no
// recipe file: its state dir and root are the node's.
func (n *Recipe) GC(ctx context.Context, dryRun bool) error {
	return reclaim.GC(ctx, reclaim.GCOptions{StateDir: n.StateDir, Root: n.Root, DryRun: dryRun, Out: n.deps().stdout(),
		NewManager: n.managers(), Node: Scope(n.deps().getenv, n.Root)})
}

// managers makes the service managers that remove and gc stop units with.
func (n *Recipe) managers() func(ctx context.Context, kind string) (service.Manager, error) {
	return func(ctx context.Context, kind string) (service.Manager, error) {
		return n.deps().manager(ctx, service.Options{Kind: kind, Root: n.Root, StateDir: n.StateDir})
	}
}
