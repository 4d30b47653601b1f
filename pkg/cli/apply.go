package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
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

func runApply(ctx context.Context, stdio IO, args []string) error {
	var o applyOptions
	fs := newFlags("apply", stdio)
	o.register(fs, stdio)
	fs.Var(&o.only, "only", "run just these steps, `STEP[,STEP]` (repeatable)")
	fs.Var(&o.force, "force", "run this step even when it would be skipped, `STEP[,STEP]` (repeatable)")
	fs.BoolVar(&o.verify, "verify", false, "re-check every output fully (re-hash downloads)")
	fs.IntVar(&o.jobs, "jobs", 4, "steps to run at once")
	fs.StringVar(&o.textfile, "textfile", "", "write the run's metrics to `FILE` for node_exporter's textfile collector")
	if err := parse(fs, args); err != nil {
		return err
	}
	rep, err := apply(ctx, stdio, &o.recipeFlags, func(e *engine.Options) {
		e.Only, e.Force = splitList(o.only.String()), splitList(o.force.String())
		e.Verify, e.Concurrency = o.verify, o.jobs
	})
	if terr := writeRunTextfile(ctx, stdio, &o.recipeFlags, o.textfile, rep, err); terr != nil {
		fmt.Fprintf(stdio.Stderr, "sglprov apply: writing the metrics textfile: %v\n", terr)
	}
	return err
}

// apply runs one apply under the state lock and prints its summary.
func apply(ctx context.Context, stdio IO, c *recipeFlags, mod func(*engine.Options)) (*engine.Report, error) {
	rep, e, err := applyKeep(ctx, stdio, c, &node.Hold{}, mod)
	if e != nil {
		e.Close()
	}
	return rep, err
}

// applyKeep is apply, under what hold holds of the node, that hands back the engine, not
// closed, when one was made: what its steps hold (an exec-managed server) lives until the
// caller closes it.
func applyKeep(ctx context.Context, stdio IO, c *recipeFlags, hold *node.Hold, mod func(*engine.Options)) (*engine.Report, *engine.Engine, error) {
	r, err := c.loadRecipe(stdio)
	if err != nil {
		return nil, nil, err
	}
	dir := c.stateDirPath()
	if err := engine.EnsureStateDir(dir, c.insecure); err != nil {
		return nil, nil, err
	}
	release, err := hold.Take(dir, stdio.Factory.Lock)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	if hold.Lock != nil {
		// The daemon holds the node's lock; others see it applying meanwhile.
		_ = hold.Lock.SetNote(engine.NoteDaemonApplying)
		defer hold.Lock.SetNote(engine.NoteDaemon)
	}
	started := time.Now()
	e, _, err := c.newEngine(ctx, stdio, r, mod)
	if err != nil {
		// A host short of the recipe, or one that needs a reboot, is a run too: recorded,
		// so that status says so and exits with its code.
		return recordRefusal(c, r, started, err), nil, err
	}
	rep, runErr := e.Apply(ctx)
	if rep == nil && engine.Refused(runErr) {
		// Refused before the first step (a GPU another recipe's server claims): a run
		// too, recorded, so that status says so and exits with its code.
		rep = recordRefusal(c, r, started, runErr)
		if rep != nil {
			fmt.Fprintf(stdio.Stdout, "\n%s: refused in %s; report: %s\n", r.Name, rep.Duration.Round(1e6), rep.Dir+string(os.PathSeparator)+"report.json")
		}
		return rep, e, runErr
	}
	if rep != nil {
		fmt.Fprintf(stdio.Stdout, "\n%s", rep.Summary())
		for _, h := range rep.Hints() {
			fmt.Fprintln(stdio.Stdout, h)
		}
		if rep.Generation != nil {
			fmt.Fprintf(stdio.Stdout, "\n%s\n", rep.Generation.Note)
		}
		fmt.Fprintf(stdio.Stdout, "\n%s: %s in %s; report: %s\n", r.Name, rep.Result, rep.Duration.Round(1e6), rep.Dir+string(os.PathSeparator)+"report.json")
	}
	return rep, e, runErr
}
