package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// Each recipe's last run: a passed one with its report; a killed one (its records say a
// step was running, no report) first, since it is newer, with exit 1; only one recipe's
// when asked; a running apply's steps are not killed.
func TestLastRunsEachRecipeKilledIncluded(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	r := load(t, w, "apiVersion: sglprov/v1\nname: a\nsteps:\n  - name: s\n    fake: {}\n")
	if _, err := newEngine(t, w, r, dir, nil).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := engine.LoadStates(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Second).UTC()
	f.Recipes["b"] = &engine.State{Recipe: "b", Updated: now, Steps: map[string]*engine.StepRecord{
		"build": {Result: engine.ResultRunning, Started: now, PID: 1 << 30}}}
	if err := engine.SaveStates(dir, f); err != nil {
		t.Fatal(err)
	}

	runs, err := engine.LastRuns(dir, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Recipe != "b" || runs[0].ExitCode != exitcode.ExitFailed || len(runs[0].Killed) != 1 ||
		runs[1].Recipe != "a" || runs[1].ExitCode != 0 || runs[1].Report == nil {
		t.Fatalf("last runs = %+v", runs)
	}
	if code := engine.LastRunsExitCode(runs); code != exitcode.ExitFailed {
		t.Errorf("exit code of both = %d, want %d", code, exitcode.ExitFailed)
	}
	only, err := engine.LastRuns(dir, "a", false)
	if err != nil || len(only) != 1 || only[0].Recipe != "a" || engine.LastRunsExitCode(only) != 0 {
		t.Errorf("a's last run = %+v, %v", only, err)
	}
	if running, _ := engine.LastRuns(dir, "b", true); len(running) != 1 || len(running[0].Killed) != 0 || running[0].ExitCode != 0 {
		t.Errorf("b while an apply runs = %+v", running)
	}
}
