package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/internal/foreign"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/service"
)

// orphanRecipe is a recipe whose unit, weights dest and generations setting a test
// changes between applies.
const orphanRecipe = `apiVersion: sglprov/v1
name: moved
generations: %s
vars:
  src: "%s"
steps:
  - name: src
    fake: {output: "{{ .vars.src }}"}
  - name: weights
    fake: {weights: %s}
  - name: service
    needs: [src, weights]
    fake: {unit: %s, input: "{{ .vars.src }}", promotes: true}
`

// What a recipe stops naming between applies (its unit renamed, its dest moved, its
// generations turned off) is not forgotten: each old record becomes an orphan of the
// state file, gc frees what nothing runs from (the old unit, the old dest's files, all
// but the serving generation), remove takes the rest with the recipe, and the files
// sglprov never wrote stay byte-identical throughout.
func TestWhatARecipeStopsNamingBecomesAnOrphan(t *testing.T) {
	w := newWorld()
	n := newNode(t, false)
	gens := n.path("opt/sglprov/generations")
	oldDest, newDest := n.path("data/models/old"), n.path("data/models/new")
	// A user's file in the old dest, which sglprov never wrote.
	tree, err := foreign.Build(n.base, "data/models/old/USER-NOTE.txt")
	if err != nil {
		t.Fatal(err)
	}
	n.tree = tree
	apply := func(generations, src, dest, unit string) {
		t.Helper()
		r := load(t, w, fmt.Sprintf(orphanRecipe, generations, src, dest, unit))
		if _, err := newEngine(t, w, r, n.state, nil).Apply(context.Background()); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	apply(fmt.Sprintf("{dir: %s, keep: 2}", gens), "{{ .generation.dir }}/src", oldDest, "old.service")
	genDir := filepath.Join(gens, "moved")
	keys, _ := filepath.Glob(filepath.Join(genDir, "[0-9a-f]???????????????"))
	if len(keys) != 1 {
		t.Fatalf("generations after the first apply: %v", keys)
	}
	// The exec manager's unit file, as the service step renders it.
	unitFile := filepath.Join(n.state, "units", "old.service")
	os.MkdirAll(filepath.Dir(unitFile), 0o755)
	os.WriteFile(unitFile, []byte("# Managed by sglprov. Recipe: moved. Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n"), 0o644)

	apply("off", n.path("srv/src"), newDest, "new.service")
	f := n.states()
	owns := map[string]string{}
	for _, o := range f.Recipes["moved"].Owns {
		owns[o.Kind] += o.Path + " "
	}
	if strings.Contains(owns[engine.OwnedUnit], "old.service") || strings.Contains(owns[engine.OwnedWeights], oldDest) || owns[engine.OwnedGenerations] != "" {
		t.Errorf("the recipe still owns what it no longer names: %v", owns)
	}
	orphan := map[string]engine.Owned{}
	for _, o := range f.Orphans {
		orphan[o.Kind] = o
	}
	if o := orphan[engine.OwnedUnit]; o.Path != "old.service" || o.Recipe != "moved" {
		t.Errorf("the old unit is not an orphan of the recipe: %+v", f.Orphans)
	}
	if o := orphan[engine.OwnedWeights]; o.Path != oldDest || strings.Join(o.Files, ",") != "model.bin" {
		t.Errorf("the old dest is not an orphan listing the file sglprov wrote: %+v", f.Orphans)
	}
	if o := orphan[engine.OwnedGenerations]; o.Path != genDir || o.Recipe != "moved" {
		t.Errorf("the generations turned off are not an orphan of the recipe: %+v", f.Orphans)
	}

	exec := func(ctx context.Context, kind string) (service.Manager, error) {
		return service.New(ctx, service.Options{Kind: service.KindExec, StateDir: n.state})
	}
	var out bytes.Buffer
	if err := engine.GC(context.Background(), engine.GCOptions{StateDir: n.state, Out: &out, NewManager: exec}); err != nil {
		t.Fatalf("gc: %v\n%s", err, out.String())
	}
	if exists(unitFile) || exists(filepath.Join(oldDest, "model.bin")) {
		t.Errorf("gc left the old unit or the old dest's file:\n%s", out.String())
	}
	if !exists(filepath.Join(newDest, "model.bin")) || !exists(keys[0]) {
		t.Errorf("gc deleted what the recipe uses, or the generation that served:\n%s", out.String())
	}
	n.intact("gc of what the recipe stopped naming")

	out.Reset()
	if err := engine.Remove(context.Background(), engine.RemoveOptions{StateDir: n.state, Recipe: "moved", Out: &out, NewManager: exec}); err != nil {
		t.Fatalf("remove: %v\n%s", err, out.String())
	}
	if exists(keys[0]) {
		t.Errorf("remove left the generation the recipe left:\n%s", out.String())
	}
	if got := n.states().Orphans; len(got) != 1 || got[0].Path != newDest {
		t.Errorf("orphans after remove: %+v, want only the kept weights of the new dest", got)
	}
	n.intact("remove of a recipe with orphans")
}

// activeManager is the exec manager with every unit active, as a server that runs.
type activeManager struct{ service.Manager }

func (activeManager) State(context.Context, string) (string, string, error) {
	return "active", "running", nil
}

// gc stops no server: a unit its recipe no longer names that is still active stays, with
// its record, and gc says how to take it off; once it is inactive gc deletes it.
func TestGCLeavesAnOrphanedUnitThatRuns(t *testing.T) {
	n := newNode(t, false)
	unitFile := filepath.Join(n.state, "units", "old.service")
	os.MkdirAll(filepath.Dir(unitFile), 0o755)
	text := "# Managed by sglprov. Recipe: moved. Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n"
	os.WriteFile(unitFile, []byte(text), 0o644)
	n.save(map[string][]engine.Owned{"moved": nil}, engine.Owned{Kind: engine.OwnedUnit, Path: "old.service", Manager: service.KindExec, Recipe: "moved"})
	gc := func(active bool) string {
		var out bytes.Buffer
		err := engine.GC(context.Background(), engine.GCOptions{StateDir: n.state, Out: &out, NewManager: func(ctx context.Context, kind string) (service.Manager, error) {
			m, err := service.New(ctx, service.Options{Kind: service.KindExec, StateDir: n.state})
			if active {
				return activeManager{m}, err
			}
			return m, err
		}})
		if err != nil {
			t.Fatalf("gc: %v\n%s", err, out.String())
		}
		return out.String()
	}
	out := gc(true)
	if b, _ := os.ReadFile(unitFile); string(b) != text || !strings.Contains(out, "is active: stop it") || len(n.states().Orphans) != 1 {
		t.Errorf("gc of an orphaned unit that runs: want it and its record kept, and said so:\n%s", out)
	}
	out = gc(false)
	if exists(unitFile) || len(n.states().Orphans) != 0 || !strings.Contains(out, "unit old.service that recipe moved no longer names: deleted") {
		t.Errorf("gc of the orphaned unit once it stopped: want it and its record gone:\n%s", out)
	}
	n.intact("an orphaned unit that runs")
}
