package cli

import (
	"context"

	"github.com/sglprov/sglprov/pkg/engine"
)

// runGC frees what no recipe on the node needs: generations beyond the kept ones, the part
// files of unfinished downloads, and what removed recipes left where no recipe uses it
// now (engine.GC). It says how much each frees.
func runGC(ctx context.Context, stdio IO, args []string) error {
	var c common
	var dryRun bool
	fs := newFlags("gc", stdio)
	c.register(fs, stdio)
	fs.BoolVar(&dryRun, "dry-run", false, "say what would be freed; change nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	return engine.GC(ctx, engine.GCOptions{StateDir: c.stateDirPath(), Root: c.root, DryRun: dryRun, Out: stdio.Stdout})
}
