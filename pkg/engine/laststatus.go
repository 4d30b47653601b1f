package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// maxReportsScanned bounds how many run folders LatestReportFor reads, newest first,
// looking for one recipe's report.
const maxReportsScanned = 1000

// LatestReportFor returns the newest finished run's report of the recipe named name in
// stateDir ("" is any recipe's, as LatestReport).
func LatestReportFor(stateDir, name string) (*Report, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, "runs"))
	if err != nil {
		return nil, fmt.Errorf("reading runs: %w", err)
	}
	for i, n := len(entries)-1, 0; i >= 0 && n < maxReportsScanned; i, n = i-1, n+1 {
		b, err := safefile.ReadNoFollow(filepath.Join(stateDir, "runs", entries[i].Name(), "report.json"))
		if err != nil {
			continue
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("reading report of run %s: %w", entries[i].Name(), err)
		}
		if name == "" || rep.Recipe == name {
			return &rep, nil
		}
	}
	if name != "" {
		return nil, fmt.Errorf("no run of recipe %s has finished yet in %s", name, stateDir)
	}
	return nil, fmt.Errorf("no run has finished yet in %s", stateDir)
}

// RecipeRun is one recipe's last run as a state dir records it.
type RecipeRun struct {
	// Recipe is the recipe's name.
	Recipe string
	// State is the recipe's records (empty when it has none).
	State *State
	// Report is the recipe's newest finished run (nil when none finished).
	Report *Report
	// Killed lists the steps recorded as running while no apply runs: the recipe's last
	// run ended before it finished them (killed, or the host went down) and wrote no
	// report; it is the recipe's last run, and it failed.
	Killed []string
	// ExitCode is the last run's exit code: exitcode.ExitFailed when it was killed or none
	// finished (0 while an apply runs).
	ExitCode int
	// Last is when the last run ended or its records were last written (a killed or
	// running one): the order of the recipes' runs.
	Last time.Time
	// Removed is when sglprov remove took the recipe off the node, after its last run
	// (zero when it is on the node); its exit code is then exitcode.ExitFailed: nothing of
	// it serves.
	Removed time.Time
}

// LastRuns returns each recipe's last run in stateDir, the newest first: only the
// recipe named only when it is not "" (with no records, it is returned with exitcode.ExitFailed).
// applyRunning says that an apply holds the state dir's lock now: its steps recorded as
// running are running, not killed.
func LastRuns(stateDir, only string, applyRunning bool) ([]RecipeRun, error) {
	f, err := LoadStates(stateDir)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for name := range f.Recipes {
		names[name] = true
	}
	// A recipe whose runs were all refused has a report and no records.
	if rep, err := LatestReportFor(stateDir, ""); err == nil && rep.Recipe != "" {
		names[rep.Recipe] = true
	}
	if only != "" {
		names = map[string]bool{only: true}
	}
	var out []RecipeRun
	for name := range names {
		// No finished run is no success, unless an apply runs now (its run is going on).
		rr := RecipeRun{Recipe: name, State: f.Recipes[name], ExitCode: exitcode.ExitFailed}
		if applyRunning {
			rr.ExitCode = exitcode.ExitOK
		}
		if rr.State == nil {
			rr.State = &State{Version: StateVersion, Recipe: name, Steps: map[string]*StepRecord{}}
		}
		if rep, err := LatestReportFor(stateDir, name); err == nil {
			rr.Report, rr.ExitCode = rep, rep.ExitCode
			rr.Last = rep.Started.Add(rep.Duration)
		}
		if !applyRunning {
			for n, r := range rr.State.Steps {
				if r.Result == ResultRunning {
					rr.Killed = append(rr.Killed, n)
				}
			}
			sort.Strings(rr.Killed)
		}
		if len(rr.Killed) > 0 {
			rr.ExitCode = exitcode.ExitFailed
		}
		if rr.State.Updated.After(rr.Last) {
			rr.Last = rr.State.Updated
		}
		if t, ok := f.Removed[name]; ok && f.Recipes[name] == nil && !t.Before(rr.Last) && !applyRunning {
			rr.Removed, rr.Last, rr.ExitCode = t, t, exitcode.ExitFailed
		}
		out = append(out, rr)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Last.Equal(out[j].Last) {
			return out[i].Last.After(out[j].Last)
		}
		return out[i].Recipe < out[j].Recipe
	})
	return out, nil
}

// LastRunsExitCode returns the exit code of a state dir holding these recipes' last runs: the
// newest failed one's, 0 when every one passed (exitcode.ExitFailed when there are none, or
// when each was removed since; a removed recipe beside others leaves the code to them).
func LastRunsExitCode(runs []RecipeRun) int {
	if len(runs) == 0 {
		return exitcode.ExitFailed
	}
	on := slices.DeleteFunc(slices.Clone(runs), func(r RecipeRun) bool { return !r.Removed.IsZero() })
	if len(on) == 0 {
		return exitcode.ExitFailed
	}
	for _, r := range on {
		if r.ExitCode != exitcode.ExitOK {
			return r.ExitCode
		}
	}
	return exitcode.ExitOK
}
