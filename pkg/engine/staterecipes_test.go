package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
)

// perRecipe is a recipe whose one step records data (as the service step records its
// winning profile); the name is filled in per recipe.
const perRecipe = `apiVersion: sglprov/v1
name: %s
steps:
  - name: service
    fake: {}
`

// Two recipes in one state dir keep their own records: the second neither reads the
// first's data nor replaces its records, and the first is still up to date afterwards.
func TestStateIsKeptPerRecipe(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	a := load(t, w, fmt.Sprintf(perRecipe, "model-a"))
	b := load(t, w, fmt.Sprintf(perRecipe, "model-b"))

	ea := newEngine(t, w, a, dir, nil)
	if err := ea.EnvFor("service").SaveData(map[string]string{"winner": "profile-of-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ea.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	eb := newEngine(t, w, b, dir, nil)
	var got map[string]string
	if eb.EnvFor("service").LoadData(&got) {
		t.Fatalf("recipe model-b read model-a's data: %v", got)
	}
	if eb.State().Steps["service"] != nil {
		t.Fatalf("recipe model-b starts with model-a's record: %+v", eb.State().Steps["service"])
	}
	w.ran = nil
	if _, err := eb.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !contains(w.ran, "service") {
		t.Errorf("model-b's step did not run (ran %v): it took model-a's record", w.ran)
	}

	f, err := engine.LoadStates(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Recipes) != 2 || f.Recipes["model-a"] == nil || f.Recipes["model-b"] == nil {
		t.Fatalf("state holds recipes %v, want model-a and model-b", keys(f.Recipes))
	}
	w.ran = nil
	ea = newEngine(t, w, a, dir, nil)
	if !ea.EnvFor("service").LoadData(&got) || got["winner"] != "profile-of-a" {
		t.Errorf("model-a's data after model-b ran = %v, want its own winner", got)
	}
	rep, err := ea.Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r := results(rep)["service"]; r != engine.ResultSkipped {
		t.Errorf("model-a's step after model-b ran = %s, want skipped (its record kept)", r)
	}
}

// A version-1 state.json (one recipe's records at the top level) is read as that
// recipe's: nothing re-runs, and the next save writes version 2 with the record kept.
func TestStateVersion1Migrates(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	r := load(t, w, fmt.Sprintf(perRecipe, "model-a"))
	if _, err := newEngine(t, w, r, dir, nil).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Write the record back as a version-1 file, as an older sglprov left it.
	f, err := engine.LoadStates(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := *f.Recipes["model-a"]
	old.Version = 1
	b, _ := json.Marshal(old)
	if err := os.WriteFile(engine.StatePath(dir), b, 0o600); err != nil {
		t.Fatal(err)
	}
	w.ran = nil
	rep, err := newEngine(t, w, r, dir, nil).Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(w.ran) != 0 || results(rep)["service"] != engine.ResultSkipped {
		t.Errorf("after migration ran %v (service %s), want nothing", w.ran, results(rep)["service"])
	}
	// A run that changes nothing leaves the file as it was; a recipe that writes turns it
	// into version 2 with model-a's record kept.
	other := load(t, w, fmt.Sprintf(perRecipe, "model-b"))
	if _, err := newEngine(t, w, other, dir, nil).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(engine.StatePath(dir))
	var head struct {
		Version int                        `json:"version"`
		Recipes map[string]json.RawMessage `json:"recipes"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		t.Fatal(err)
	}
	if head.Version != engine.StateVersion || head.Recipes["model-a"] == nil || head.Recipes["model-b"] == nil {
		t.Errorf("state after migration: version %d, recipes %v; want %d with model-a and model-b", head.Version, keys(head.Recipes), engine.StateVersion)
	}
}

// Removing one recipe's records keeps the others'.
func TestRemoveRecipeState(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	for _, name := range []string{"model-a", "model-b"} {
		if _, err := newEngine(t, w, load(t, w, fmt.Sprintf(perRecipe, name)), dir, nil).Apply(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ok, err := engine.RemoveRecipeState(dir, "model-a")
	if err != nil || !ok {
		t.Fatalf("RemoveRecipeState = %v, %v", ok, err)
	}
	f, _ := engine.LoadStates(dir)
	if f.Recipes["model-a"] != nil || f.Recipes["model-b"] == nil {
		t.Errorf("after removing model-a the state holds %v", keys(f.Recipes))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
