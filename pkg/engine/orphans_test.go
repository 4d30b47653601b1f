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
	"github.com/sglprov/sglprov/pkg/reclaim"
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
	n := newHost(t)
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
	if err := reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: n.state, Out: &out, NewManager: exec}); err != nil {
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
	if err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Recipe: "moved", Out: &out, NewManager: exec}); err != nil {
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

// host is a state dir beside files sglprov never wrote (internal/foreign), for the tests
// that apply a recipe and then take back what it wrote (pkg/reclaim).
type host struct {
	t           *testing.T
	base, state string
	tree        *foreign.Tree
}

func newHost(t *testing.T) *host {
	t.Helper()
	base := t.TempDir()
	h := &host{t: t, base: base, state: filepath.Join(base, "var/lib/sglprov")}
	if err := os.MkdirAll(h.state, 0o700); err != nil {
		t.Fatal(err)
	}
	return h
}

// path is the host path of rel under the host's base.
func (h *host) path(rel string) string { return filepath.Join(h.base, filepath.FromSlash(rel)) }

func (h *host) states() *engine.StateFile {
	h.t.Helper()
	f, err := engine.LoadStates(h.state)
	if err != nil {
		h.t.Fatal(err)
	}
	return f
}

// intact fails the test unless every file sglprov never wrote is byte-identical.
func (h *host) intact(when string) {
	h.t.Helper()
	if changed := h.tree.Changed(); len(changed) > 0 {
		h.t.Errorf("%s: files sglprov never wrote changed:\n%s", when, strings.Join(changed, "\n"))
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }
