package cli

import (
	"context"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/service"
)

// runRemove takes a recipe off the node: its units, generations and records, and with
// --weights the files its downloads wrote; what another recipe on the node also uses is
// kept (engine.Remove).
func runRemove(ctx context.Context, stdio IO, args []string) error {
	var c common
	var weights, dryRun bool
	flags := newFlags("remove", stdio)
	c.register(flags, stdio)
	flags.BoolVar(&weights, "weights", false, "delete the files the recipe's downloads wrote too")
	flags.BoolVar(&dryRun, "dry-run", false, "say what would be removed and freed; change nothing")
	if err := parse(flags, args); err != nil {
		return err
	}
	r, err := c.loadRecipe(stdio)
	if err != nil {
		return err
	}
	return engine.Remove(ctx, engine.RemoveOptions{StateDir: c.stateDirPath(), Root: c.root, Recipe: r.Name,
		Weights: weights, DryRun: dryRun, Out: stdio.Stdout, NewManager: managers(stdio, c.root, c.stateDirPath())})
}

// managers makes the service managers that remove stops units with, through the factory.
func managers(stdio IO, root, stateDir string) func(ctx context.Context, kind string) (service.Manager, error) {
	return func(ctx context.Context, kind string) (service.Manager, error) {
		return stdio.Factory.Manager(ctx, service.Options{Kind: kind, Root: root, StateDir: stateDir})
	}
}
