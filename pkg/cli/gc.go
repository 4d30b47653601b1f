package cli

import (
	"context"

	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/reclaim"
)

// runGC frees what no recipe on the node needs: generations beyond the kept ones, the part
// files of unfinished downloads, and what removed recipes left where no recipe uses it
// now (reclaim.GC). It says how much each frees.
func runGC(ctx context.Context, stdio IO, args []string) error {
	var o gcOptions
	fs := newFlags("gc", stdio)
	o.register(fs, stdio)
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be freed; change nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	return reclaim.GC(ctx, reclaim.GCOptions{StateDir: o.stateDirPath(), Root: o.root, DryRun: o.dryRun, Out: stdio.Stdout,
		NewManager: managers(stdio, o.root, o.stateDirPath()), Node: node.Scope(stdio.Getenv, o.root)})
}

// gcOptions are gc's flags.
type gcOptions struct {
	recipeFlags
	dryRun bool
}
