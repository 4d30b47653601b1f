package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// statusOptions are status's flags.
type statusOptions struct {
	recipeFlags
	json bool
}

// parseStatus parses status's command line into its options.
func parseStatus(stdio IO, args []string) (*statusOptions, error) {
	var o statusOptions
	fs := newFlags("status", stdio)
	o.register(fs, stdio)
	fs.jsonFlags(&o.json, "print the status as JSON")
	return &o, parse(fs, args)
}

// statusRun prints each recipe's last run (the newest first; only the -f recipe's with -f);
// its exit code is the newest failed run's, 0 when each passed, 1 when none was recorded.
func statusRun(ctx context.Context, stdio IO, o *statusOptions) error {
	c, asJSON := &o.recipeFlags, o.json
	dir := c.stateDirPath()
	only := ""
	var r *recipe.Recipe
	if c.recipe != "" {
		var err error
		if r, err = c.loadRecipe(stdio); err != nil {
			return err
		}
		only = r.Name
	}
	// Each recipe's generations, newest first (the folders looked at for the -f recipe).
	gens := func(name string) []node.GenerationEntry {
		if name == "" {
			return nil
		}
		var rr *recipe.Recipe
		if r != nil && r.Name == name {
			rr = r
		}
		g, err := node.Generations(c.root, dir, name, rr)
		if err != nil {
			fmt.Fprintf(stdio.Stderr, "sglprov status: reading the generations of %s: %v\n", name, err)
		}
		return g
	}
	rd, err := node.ReadStatus(dir, only, stdio.Factory.SharedLock)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		st := rd.Status()
		if len(rd.Runs) > 0 {
			st.Generations = gens(rd.Runs[0].Recipe)
		}
		for i := range st.Recipes {
			st.Recipes[i].Generations = gens(st.Recipes[i].Recipe)
		}
		if err := enc.Encode(st); err != nil {
			return fmt.Errorf("writing the status: %w", err)
		}
		return exitAs(rd.ExitCode)
	}
	running, code := rd.Running, rd.ExitCode
	if rd.Daemon > 0 {
		fmt.Fprintf(stdio.Stdout, "the sglprov daemon, pid %d, watches this node\n", rd.Daemon)
	}
	switch {
	case running > 0:
		fmt.Fprintf(stdio.Stdout, "an apply is running, pid %d: each step as recorded so far\n", running)
	case running < 0:
		fmt.Fprintln(stdio.Stdout, "an apply is running: each step as recorded so far")
	case rd.None && only != "":
		fmt.Fprintf(stdio.Stdout, "no run of recipe %s recorded in %s (exit 1: sglprov apply -f RECIPE records one)\n", only, dir)
		return exitAs(code)
	case rd.None:
		fmt.Fprintf(stdio.Stdout, "no run recorded in %s (exit 1: sglprov apply -f RECIPE records one)\n", dir)
		return exitAs(code)
	}
	for i, rr := range rd.Runs {
		if i > 0 {
			fmt.Fprintln(stdio.Stdout)
		}
		if err := writeRecipeRun(stdio.Stdout, rr, running); err != nil {
			return err
		}
		writeGenerations(stdio.Stdout, gens(rr.Recipe))
	}
	return exitAs(code)
}

// writeRecipeRun prints one recipe's last run: the report's summary when it finished,
// else each step as recorded (a run going on or killed).
func writeRecipeRun(out io.Writer, rr engine.RecipeRun, running int) error {
	rep, st, killed := rr.Report, rr.State, rr.Killed
	if !rr.Removed.IsZero() {
		fmt.Fprintf(out, "recipe %s was removed at %s (sglprov remove): nothing of it is on the node; sglprov apply -f RECIPE puts it back\n",
			rr.Recipe, rr.Removed.Format(time.RFC3339))
		if rep != nil {
			fmt.Fprintf(out, "its last run before: %s at %s, exit %d\n", rep.Result, rep.Started.Format(time.RFC3339), rep.ExitCode)
		}
		return nil
	}
	switch {
	case !st.Updated.IsZero():
		fmt.Fprintf(out, "recipe %s, state updated %s\n", st.Recipe, st.Updated.Format(time.RFC3339))
	case rep != nil:
		// Only refused runs so far: nothing ran, the state was never written.
		fmt.Fprintf(out, "recipe %s, no step has run yet\n", rep.Recipe)
	}
	if len(killed) > 0 {
		fmt.Fprintf(out, "last run: ended before it finished (killed?): %s was running; the next apply redoes it\n",
			strings.Join(killed, ", "))
	}
	if rep != nil && (running != 0 || len(killed) > 0) {
		fmt.Fprintf(out, "last finished run: %s at %s, exit %d\n  report: %s/report.json\n",
			rep.Result, rep.Started.Format(time.RFC3339), rep.ExitCode, rep.Dir)
	}
	if rep != nil && running == 0 && len(killed) == 0 {
		fmt.Fprintf(out, "last run: %s at %s, exit %d, took %s\n  report: %s/report.json\n",
			rep.Result, rep.Started.Format(time.RFC3339), rep.ExitCode, rep.Duration.Round(time.Millisecond), rep.Dir)
		if rep.Result == engine.ResultRefused {
			// Nothing ran: the refusal is the whole story.
			fmt.Fprintf(out, "refused before any step ran: %s\n", strings.TrimSpace(rep.Error))
			return nil
		}
		node.ProfileOf(rep, st).Write(out)
		if rep.Generation != nil {
			fmt.Fprintf(out, "%s\n", rep.Generation.Note)
		}
		fmt.Fprintf(out, "\n%s", rep.Summary())
		if f := rep.Failures(10); f != "" {
			fmt.Fprintf(out, "\n%s", f)
		}
		return nil
	}
	names := make([]string, 0, len(st.Steps))
	for n := range st.Steps {
		names = append(names, n)
	}
	sort.Strings(names)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tRESULT\tSTARTED\tDURATION\tREASON")
	for _, n := range names {
		r := st.Steps[n]
		result := r.Result
		if result == engine.ResultRunning && len(killed) > 0 {
			result = engine.ResultInterrupted
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n, result, r.Started.Format(time.RFC3339), r.Duration.Round(time.Millisecond), r.Reason)
	}
	return w.Flush()
}

// writeGenerations lists a recipe's generations, newest first, and where `sglprov
// rollback` goes (nothing when it keeps none).
func writeGenerations(out io.Writer, gens []node.GenerationEntry) {
	if len(gens) == 0 {
		return
	}
	fmt.Fprintln(out, "\ngenerations (newest first; sglprov rollback goes to the previous one, --to GENERATION to another that passed):")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  GENERATION\tSTATE\tCREATED\tPASSED")
	for _, g := range gens {
		passed := "never"
		if g.Passed != nil {
			passed = g.Passed.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", g.Key, g.State, g.Created.Format(time.RFC3339), passed)
	}
	w.Flush()
}

// exitAs returns an error that carries exit code code and prints nothing more.
func exitAs(code int) error {
	if code == exitcode.ExitOK {
		return nil
	}
	mark := exitcode.Err(code)
	if mark == nil {
		mark = errors.New("the last run failed")
	}
	return reported(fmt.Errorf("last run exited %d: %w", code, mark))
}
