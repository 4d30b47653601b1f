package cli

import (
	"context"

	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/reclaim"
	"github.com/sglprov/sglprov/pkg/service"
)

// runRemove takes a recipe off the node: its units, generations and records, and with
// --weights the files its downloads wrote; what another recipe on the node also uses is
// kept (reclaim.Remove).
func runRemove(ctx context.Context, stdio IO, args []string) error {
	var o removeOptions
	flags := newFlags("remove", stdio)
	o.register(flags, stdio)
	flags.BoolVar(&o.weights, "weights", false, "delete the files the recipe's downloads wrote too")
	flags.BoolVar(&o.dryRun, "dry-run", false, "say what would be removed and freed; change nothing")
	if err := parse(flags, args); err != nil {
		return err
	}
	r, err := o.loadRecipe(stdio)
	if err != nil {
		return err
	}
	return reclaim.Remove(ctx, reclaim.RemoveOptions{StateDir: o.stateDirPath(), Root: o.root, Recipe: r.Name,
		Weights: o.weights, DryRun: o.dryRun, Out: stdio.Stdout, NewManager: managers(stdio, o.root, o.stateDirPath()),
		Node: node.Scope(stdio.Getenv, o.root)})
}

// removeOptions are remove's flags.
type removeOptions struct {
	recipeFlags
	weights, dryRun bool
}

// managers makes the service managers that remove and gc stop units with, through the
// factory.
func managers(stdio IO, root, stateDir string) func(ctx context.Context, kind string) (service.Manager, error) {
	return func(ctx context.Context, kind string) (service.Manager, error) {
		return stdio.Factory.Manager(ctx, service.Options{Kind: kind, Root: root, StateDir: stateDir})
	}
}
