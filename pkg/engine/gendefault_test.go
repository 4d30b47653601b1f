package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// defaultGenRecipe is a recipe of the shipped recipes' shape: a source tree at a fixed
// path, a build into it, weights outside, a service that runs from the tree. It never
// names {{ .generation.dir }}.
const defaultGenRecipe = `apiVersion: sglprov/v1
name: gd
generations: {dir: %s}
vars:
  pin: "1"
  flag: "a"
  src: %s
steps:
  - name: src
    source: {dest: "{{ .vars.src }}", input: "{{ .vars.pin }}"}
  - name: kernel
    needs: [src]
    fake: {output: "{{ .vars.src }}/dist", fail: %v}
  - name: weights
    fake: {output: %s}
  - name: service
    needs: [kernel, weights]
    svc: {input: "{{ .vars.src }}/bin/python --flag {{ .vars.flag }}"}
`

type sourceSpec struct {
	Dest  string `yaml:"dest"`
	Input string `yaml:"input"`
}

// defaultGenRegistry is the fake registry with a "source" kind (its dest is made, as a
// source step clones into it) and a "svc" kind that reads a generation (as the systemd
// step does).
func defaultGenRegistry(w *world) engine.Registry {
	reg := registry(w)
	reg["source"] = engine.Kind{
		NewSpec: func() any { return &sourceSpec{} },
		New: func(name string, spec any) (engine.Step, error) {
			s := spec.(*sourceSpec)
			return &fakeStep{name: name, spec: fakeSpec{Output: s.Dest, Input: s.Input}, w: w}, nil
		},
	}
	svc := reg["fake"]
	svc.ReadsGeneration = true
	reg["svc"] = svc
	return reg
}

func loadWith(t *testing.T, reg engine.Registry, text string, sets ...string) *recipe.Recipe {
	t.Helper()
	specs := recipe.KindSpecs{}
	for k, v := range reg {
		specs[k] = v.NewSpec
	}
	r, err := recipe.Parse("test.yaml", []byte(text), specs, sets)
	if err != nil {
		t.Fatalf("parsing recipe: %v", err)
	}
	return r
}

// A recipe that names a plain dest builds in a generation beside it by default. A node
// provisioned in place keeps serving its tree while a new build fails; when a generation
// passes, the in-place tree is moved aside (kept byte-identical, never deleted) and the
// dest becomes a link to the serving generation, flipped by each generation that passes.
// A server flag (the service reads the generation, writes nothing there) keeps the
// generation.
func TestGenerationsByDefault(t *testing.T) {
	w := newWorld()
	reg := defaultGenRegistry(w)
	dir, gens, base := t.TempDir(), t.TempDir(), t.TempDir()
	root := filepath.Join(base, "opt", "sglang")
	weights := filepath.Join(base, "models")
	// The node as an in-place run left it: the tree serves from the dest.
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	userFile := filepath.Join(root, "bin", "python")
	if err := os.WriteFile(userFile, []byte("in place\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	apply := func(fail bool, sets ...string) (*engine.Report, error) {
		t.Helper()
		r := loadWith(t, reg, fmt.Sprintf(defaultGenRecipe, gens, root, fail, weights), sets...)
		w.ran = nil
		e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return e.Apply(context.Background())
	}

	r := loadWith(t, reg, fmt.Sprintf(defaultGenRecipe, gens, root, false, weights))
	if roots := r.GenerationRoots(); len(roots) != 1 || roots[0].Path != root || roots[0].Sub != "sglang" {
		t.Fatalf("generation roots = %+v, want %s", roots, root)
	}

	// A new build that fails: the in-place tree stays where it is, and serves.
	if _, err := apply(true); err == nil {
		t.Fatal("a failing build passed")
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		t.Fatalf("after a failed build the in-place tree is %v, %v; want the folder as it was", fi, err)
	}
	if b, err := os.ReadFile(userFile); err != nil || string(b) != "in place\n" {
		t.Fatalf("the in-place tree changed: %q, %v", b, err)
	}

	rep, err := apply(false)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving
	target, err := os.Readlink(root)
	if want := filepath.Join(gens, "gd", g1, "sglang"); err != nil || target != want {
		t.Fatalf("after a generation passed, %s links to %q (%v); want %s", root, target, err, want)
	}
	if _, err := os.Stat(filepath.Join(target, "made-by-src")); err != nil {
		t.Errorf("the source was not built in the generation: %v", err)
	}
	aside := root + ".sglprov-inplace"
	if b, err := os.ReadFile(filepath.Join(aside, "bin", "python")); err != nil || string(b) != "in place\n" {
		t.Errorf("the in-place tree was not kept beside the link: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(weights, "made-by-weights")); err != nil {
		t.Errorf("the weights moved into the generation: %v", err)
	}

	// A server flag is no generation input: nothing is built again.
	if rep, err = apply(false, "flag=b"); err != nil {
		t.Fatal(err)
	}
	if rep.Generation.Serving != g1 || contains(w.ran, "src") || contains(w.ran, "kernel") || !contains(w.ran, "service") {
		t.Errorf("a new server flag: serving %s (was %s), ran %v; want only the service", rep.Generation.Serving, g1, w.ran)
	}

	// A new pin: a new generation, and the link flips to it.
	if rep, err = apply(false, "pin=2"); err != nil {
		t.Fatal(err)
	}
	g2 := rep.Generation.Serving
	if target, _ := os.Readlink(root); g2 == g1 || target != filepath.Join(gens, "gd", g2, "sglang") {
		t.Errorf("a new pin: serving %s, link %s", g2, target)
	}
	if b, err := os.ReadFile(filepath.Join(aside, "bin", "python")); err != nil || string(b) != "in place\n" {
		t.Errorf("the moved-aside tree changed: %q, %v", b, err)
	}
}

// generations: off keeps the recipe's paths as written.
func TestGenerationsOff(t *testing.T) {
	reg := defaultGenRegistry(newWorld())
	text := strings.Replace(fmt.Sprintf(defaultGenRecipe, "/g", "/opt/sglang", false, "/models"), "generations: {dir: /g}", "generations: off", 1)
	r := loadWith(t, reg, text)
	if len(r.GenerationRoots()) != 0 || r.UsesGenerations() || r.Vars["src"] != "/opt/sglang" || !r.GenerationsOff() {
		t.Errorf("generations: off: roots %v, uses %v, src %q", r.GenerationRoots(), r.UsesGenerations(), r.Vars["src"])
	}
}
