package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Two recipes in one state dir: a passed, then an apply of b was killed while its step
// ran (its record says running, no report). status shows both, b's killed run first, and
// exits 1; status -f a shows a's run alone and exits 0; status -f b exits 1.
func TestStatusEachRecipeKilledIncluded(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	mk := func(name string) string {
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		return writeRecipe(t, sub, "apiVersion: sglprov/v1\nname: "+name+"\nsteps:\n  - name: s-"+name+"\n    command: {argv: [\"true\"]}\n")
	}
	a, b := mk("a"), mk("b")
	if code, _, stderr := run(t, nil, "apply", "-f", a, "--state-dir", state); code != 0 {
		t.Fatalf("apply a: exit %d: %s", code, stderr)
	}
	// What a kill -9 during b's step leaves: b's record of the step says running.
	f, err := engine.LoadStates(state)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Second).UTC()
	f.Recipes["b"] = &engine.State{Recipe: "b", Updated: now, Steps: map[string]*engine.StepRecord{
		"s-b": {Result: engine.ResultRunning, Started: now, PID: 1 << 30}}}
	if err := engine.SaveStates(state, f); err != nil {
		t.Fatal(err)
	}

	code, out, _ := run(t, nil, "status", "--state-dir", state)
	ib, ia := strings.Index(out, "recipe b"), strings.Index(out, "recipe a")
	if code != 1 || ib < 0 || ia < ib || !strings.Contains(out, "s-b was running") {
		t.Errorf("status: exit %d, want 1, b's killed run then a's:\n%s", code, out)
	}
	code, out, _ = run(t, nil, "status", "-f", a, "--state-dir", state)
	if code != 0 || !strings.Contains(out, "recipe a") || strings.Contains(out, "recipe b") {
		t.Errorf("status -f a: exit %d, want 0 and a's run alone:\n%s", code, out)
	}
	code, out, _ = run(t, nil, "status", "-f", b, "--state-dir", state)
	if code != 1 || !strings.Contains(out, "s-b was running") || strings.Contains(out, "recipe a") {
		t.Errorf("status -f b: exit %d, want 1 and b's killed run alone:\n%s", code, out)
	}
	code, out, _ = run(t, nil, "status", "--json", "--state-dir", state)
	if code != 1 || !strings.Contains(out, `"recipes"`) || !strings.Contains(out, `"interrupted_steps"`) {
		t.Errorf("status --json: exit %d, want 1 with each recipe:\n%s", code, out)
	}
}
