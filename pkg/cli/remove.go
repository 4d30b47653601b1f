package cli

import (
	"context"
)

// removeOptions are remove's flags.
type removeOptions struct {
	recipeFlags
	weights, dryRun bool
}

// parseRemove parses remove's command line into its options.
func parseRemove(stdio IO, args []string) (*removeOptions, error) {
	var o removeOptions
	fs := newFlags("remove", stdio)
	o.register(fs, stdio)
	fs.BoolVar(&o.weights, "weights", false, "delete the files the recipe's downloads wrote too")
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be removed and freed; change nothing")
	return &o, parse(fs, args)
}

// removeRun takes a recipe off the node (node.Recipe.Remove, which says what it frees).
func removeRun(ctx context.Context, stdio IO, o *removeOptions) error {
	return o.unlogged(stdio).Remove(ctx, o.weights, o.dryRun)
}

// gcOptions are gc's flags.
type gcOptions struct {
	recipeFlags
	dryRun bool
}

// parseGC parses gc's command line into its options.
func parseGC(stdio IO, args []string) (*gcOptions, error) {
	var o gcOptions
	fs := newFlags("gc", stdio)
	o.register(fs, stdio)
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be freed; change nothing")
	return &o, parse(fs, args)
}

// gcRun frees what no recipe on the node needs (node.Recipe.GC, which says how much each
// frees).
func gcRun(ctx context.Context, stdio IO, o *gcOptions) error {
	return o.unlogged(stdio).GC(ctx, o.dryRun)
}
