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
)

// statusJSON is what `status --json` prints.
type statusJSON struct {
	StateDir string `json:"state_dir"`
	// Message says that no run was recorded (then State and Report are absent).
	Message string         `json:"message,omitempty"`
	State   *engine.State  `json:"state,omitempty"`
	Report  *engine.Report `json:"last_run,omitempty"`
	// ExitCode is the last run's exit code, which is also status's own.
	ExitCode int `json:"exit_code"`
	// Profile is the profile the service runs and whether it passed the gate.
	Profile *node.Profile `json:"profile,omitempty"`
	// ApplyRunning is the pid of an apply running now (-1 when its pid is unknown).
	ApplyRunning int `json:"apply_running_pid,omitempty"`
	// Interrupted lists the steps that the state records as running while no apply runs:
	// the last run ended before it finished them (then ExitCode is 1).
	Interrupted []string `json:"interrupted_steps,omitempty"`
	// Daemon is the pid of the sglprov daemon that watches the node (holds its lock).
	Daemon int `json:"daemon_pid,omitempty"`
	// Recipes is each recipe's last run, the newest first, when the state dir holds
	// several (the fields above are the first's).
	Recipes []recipeRunJSON `json:"recipes,omitempty"`
}

// recipeRunJSON is one recipe's last run in `status --json` of a state dir with several.
type recipeRunJSON struct {
	Recipe string `json:"recipe"`
	// ExitCode is the recipe's last run's exit code (1 when it was killed).
	ExitCode int            `json:"exit_code"`
	Report   *engine.Report `json:"last_run,omitempty"`
	// Interrupted lists the steps the recipe's last run was running when it ended.
	Interrupted []string      `json:"interrupted_steps,omitempty"`
	Profile     *node.Profile `json:"profile,omitempty"`
}

// statusOptions are status's flags.
type statusOptions struct {
	recipeFlags
	json bool
}

// runStatus prints each recipe's last run (the newest first; only the -f recipe's with
// -f); its exit code is the newest failed run's, 0 when each passed, 1 when none was
// recorded.
func runStatus(ctx context.Context, stdio IO, args []string) error {
	var o statusOptions
	fs := newFlags("status", stdio)
	o.register(fs, stdio)
	fs.BoolVar(&o.json, "json", false, "print the status as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, asJSON := &o.recipeFlags, o.json
	dir := c.stateDirPath()
	only := ""
	if c.recipe != "" {
		r, err := c.loadRecipe(stdio)
		if err != nil {
			return err
		}
		only = r.Name
	}
	running, daemonPid := node.ApplyRunning(dir, stdio.Factory.SharedLock)
	runs, err := engine.LastRuns(dir, only, running != 0)
	if err != nil {
		return err
	}
	var first engine.RecipeRun
	if len(runs) > 0 {
		first = runs[0]
	} else {
		first = engine.RecipeRun{State: &engine.State{Version: engine.StateVersion, Steps: map[string]*engine.StepRecord{}}}
	}
	rep, st, killed := first.Report, first.State, first.Killed
	none := len(st.Steps) == 0 && rep == nil
	code := engine.LastRunsExitCode(runs)
	// No run recorded is not a success: a script that runs status after starting the
	// daemon (cloud-init's runcmd) must not read "nothing ran" as "the node serves".
	noRun := none && running == 0
	if none && running != 0 {
		code = 0
	}
	prof := node.ProfileOf(rep, st)
	if asJSON {
		out := statusJSON{StateDir: dir, Report: rep, ExitCode: code, Profile: prof, ApplyRunning: running, Interrupted: killed, Daemon: daemonPid}
		if noRun {
			out.Message = "no run recorded in " + dir
			if only != "" {
				out.Message = "no run of recipe " + only + " recorded in " + dir
			}
		} else {
			out.State = st
		}
		if len(runs) > 1 {
			for _, rr := range runs {
				out.Recipes = append(out.Recipes, recipeRunJSON{Recipe: rr.Recipe, ExitCode: rr.ExitCode, Report: rr.Report,
					Interrupted: rr.Killed, Profile: node.ProfileOf(rr.Report, rr.State)})
			}
		}
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("writing the status: %w", err)
		}
		return exitAs(code)
	}
	if daemonPid > 0 {
		fmt.Fprintf(stdio.Stdout, "the sglprov daemon, pid %d, watches this node\n", daemonPid)
	}
	switch {
	case running > 0:
		fmt.Fprintf(stdio.Stdout, "an apply is running, pid %d: each step as recorded so far\n", running)
	case running < 0:
		fmt.Fprintln(stdio.Stdout, "an apply is running: each step as recorded so far")
	case none && only != "":
		fmt.Fprintf(stdio.Stdout, "no run of recipe %s recorded in %s (exit 1: sglprov apply -f RECIPE records one)\n", only, dir)
		return exitAs(code)
	case none:
		fmt.Fprintf(stdio.Stdout, "no run recorded in %s (exit 1: sglprov apply -f RECIPE records one)\n", dir)
		return exitAs(code)
	}
	if len(runs) == 0 {
		runs = []engine.RecipeRun{first}
	}
	for i, rr := range runs {
		if i > 0 {
			fmt.Fprintln(stdio.Stdout)
		}
		if err := writeRecipeRun(stdio.Stdout, rr, running); err != nil {
			return err
		}
	}
	return exitAs(code)
}

// writeRecipeRun prints one recipe's last run: the report's summary when it finished,
// else each step as recorded (a run going on or killed).
func writeRecipeRun(out io.Writer, rr engine.RecipeRun, running int) error {
	rep, st, killed := rr.Report, rr.State, rr.Killed
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
