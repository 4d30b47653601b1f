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
	Profile *profileStatus `json:"profile,omitempty"`
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

// applyRunning returns the pid of the apply that holds dir's lock now (-1 when it wrote
// none), or 0 when none does, and the daemon's pid when a daemon holds it (between its
// applies a daemon is not an apply running). It takes the lock shared and gives it back at
// once, so that status never keeps an apply from starting.
func applyRunning(stdio IO, dir string) (running, daemonPid int) {
	lock, err := stdio.Factory.SharedLock(dir)
	if !errors.Is(err, exitcode.ErrLocked) {
		lock.Release()
		return 0, 0
	}
	pid := engine.LockHolder(dir)
	switch engine.LockNote(dir) {
	case engine.NoteDaemon:
		return 0, pid
	case engine.NoteDaemonApplying:
		return pid, pid
	}
	if pid > 0 {
		return pid, 0
	}
	return -1, 0
}

// recipeRunJSON is one recipe's last run in `status --json` of a state dir with several.
type recipeRunJSON struct {
	Recipe string `json:"recipe"`
	// ExitCode is the recipe's last run's exit code (1 when it was killed).
	ExitCode int            `json:"exit_code"`
	Report   *engine.Report `json:"last_run,omitempty"`
	// Interrupted lists the steps the recipe's last run was running when it ended.
	Interrupted []string       `json:"interrupted_steps,omitempty"`
	Profile     *profileStatus `json:"profile,omitempty"`
}

// runStatus prints each recipe's last run (the newest first; only the -f recipe's with
// -f); its exit code is the newest failed run's, 0 when each passed, 1 when none was
// recorded.
func runStatus(ctx context.Context, stdio IO, args []string) error {
	var c common
	var asJSON bool
	fs := newFlags("status", stdio)
	c.register(fs, stdio)
	fs.BoolVar(&asJSON, "json", false, "print the status as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	dir := c.stateDirPath()
	only := ""
	if c.recipe != "" {
		r, err := c.loadRecipe(stdio)
		if err != nil {
			return err
		}
		only = r.Name
	}
	running, daemonPid := applyRunning(stdio, dir)
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
	prof := profileOf(rep, st)
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
					Interrupted: rr.Killed, Profile: profileOf(rr.Report, rr.State)})
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
		writeProfile(out, profileOf(rep, st))
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

// profileStatus is the backend profile of the recipe's service as the last run left it.
type profileStatus struct {
	// Step is the service step.
	Step string `json:"step"`
	// Running is the profile the installed unit has (the state's record).
	Running string `json:"running,omitempty"`
	// Won is the profile that passed the gate in the last run ("" when none did).
	Won string `json:"won,omitempty"`
	// Failed lists the profiles the last run's gate rejected.
	Failed []string `json:"failed,omitempty"`
	// AllFailed is true when every candidate failed the gate in the last run.
	AllFailed bool `json:"all_failed,omitempty"`
}

// profileOf reads the service's profile from the state and the last report's gate.
func profileOf(rep *engine.Report, st *engine.State) *profileStatus {
	var p *profileStatus
	for name, rec := range st.Steps {
		var data struct {
			Active string `json:"active"`
			Winner string `json:"winner"`
		}
		if len(rec.Data) == 0 || json.Unmarshal(rec.Data, &data) != nil || data.Active == "" && data.Winner == "" {
			continue
		}
		if p == nil || name < p.Step {
			p = &profileStatus{Step: name, Running: data.Active}
		}
	}
	if rep == nil {
		return p
	}
	for _, s := range rep.Steps {
		if s.Kind != "smoke" || s.Details == nil {
			continue
		}
		tried, _ := s.Details["profiles"].([]any)
		if len(tried) == 0 {
			continue
		}
		if p == nil {
			p = &profileStatus{}
		}
		won, _ := s.Details["profile"].(string)
		p.Won = won
		for _, t := range tried {
			m, _ := t.(map[string]any)
			name, _ := m["profile"].(string)
			if name != "" && name != won {
				p.Failed = append(p.Failed, name)
			}
		}
		p.AllFailed = won == "" && s.Result == engine.ResultFailed
		break
	}
	return p
}

func writeProfile(w io.Writer, p *profileStatus) {
	if p == nil {
		return
	}
	switch {
	case p.AllFailed:
		fmt.Fprintf(w, "profile: every candidate failed the gate (%s)", strings.Join(p.Failed, ", "))
		if p.Running != "" {
			fmt.Fprintf(w, "; the unit runs %s", p.Running)
		}
		fmt.Fprintln(w)
	case p.Won != "":
		fmt.Fprintf(w, "profile: %s passed the gate", p.Won)
		if len(p.Failed) > 0 {
			fmt.Fprintf(w, " (failed before it: %s)", strings.Join(p.Failed, ", "))
		}
		fmt.Fprintln(w)
	case p.Running != "":
		fmt.Fprintf(w, "profile: %s (installed; the last run did not gate it)\n", p.Running)
	}
}
