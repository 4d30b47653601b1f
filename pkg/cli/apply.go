package cli

import (
	"context"
	"fmt"

	"github.com/sglprov/sglprov/pkg/node"
)

// applyOptions are apply's flags.
type applyOptions struct {
	recipeFlags
	only, force multi
	verify      bool
	jobs        int
	textfile    string
}

// parseApply parses apply's command line into its options.
func parseApply(stdio IO, args []string) (*applyOptions, error) {
	var o applyOptions
	fs := newFlags("apply", stdio)
	o.register(fs, stdio)
	fs.Var(&o.only, "only", "run just these steps, `STEP[,STEP]` (repeatable)")
	fs.Var(&o.force, "force", "run this step even when it would be skipped, `STEP[,STEP]` (repeatable)")
	fs.BoolVar(&o.verify, "verify", false, "re-check every output fully (re-hash downloads)")
	fs.IntVar(&o.jobs, "jobs", 4, "steps to run at once")
	fs.StringVar(&o.textfile, "textfile", "", "write the run's metrics to `FILE` for node_exporter's textfile collector")
	return &o, parse(fs, args)
}

// applyRun applies the recipe (node.Recipe.Apply, which prints the run's summary) and
// writes the run's textfile.
func applyRun(ctx context.Context, stdio IO, o *applyOptions) error {
	n, err := o.node(stdio)
	if err != nil {
		return err
	}
	rep, e, err := n.Apply(ctx, node.ApplyOptions{Only: splitList(o.only.String()), Force: splitList(o.force.String()),
		Verify: o.verify, Jobs: o.jobs})
	if e != nil {
		e.Close()
	}
	if terr := n.WriteRunTextfile(ctx, o.textfile, rep, err); terr != nil {
		fmt.Fprintf(stdio.Stderr, "sglprov apply: writing the metrics textfile: %v\n", terr)
	}
	return err
}
