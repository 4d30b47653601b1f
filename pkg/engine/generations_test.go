package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/reclaim"
)

// genRecipe builds src and kernel into the generation; weights and service stay outside.
const genRecipe = `apiVersion: sglprov/v1
name: gen
generations: {dir: %s, keep: 2}
vars:
  pin: "1"
  src: "{{ .generation.dir }}/src"
steps:
  - name: src
    fake: {input: "{{ .vars.pin }}", output: "{{ .vars.src }}"}
  - name: kernel
    needs: [src]
    fake: {output: "{{ .vars.src }}/dist", fail: %v}
  - name: weights
    fake: {output: /models/a}
  - name: service
    needs: [kernel, weights]
    fake: {input: "{{ .vars.src }}/bin/python"}
`

func genApply(t *testing.T, w *world, gens, dir string, fail bool, sets ...string) (*engine.Report, error) {
	t.Helper()
	r := load(t, w, fmt.Sprintf(genRecipe, gens, fail), sets...)
	w.ran = nil
	return newEngine(t, w, r, dir, nil).Apply(context.Background())
}

func currentLink(t *testing.T, gens string) string {
	t.Helper()
	got, err := os.Readlink(filepath.Join(gens, "gen", generation.CurrentLink))
	if err != nil {
		t.Fatalf("reading the current link: %v", err)
	}
	return got
}

// A new pin builds into a new generation beside the serving one; only the steps that
// build into a generation run for it; going back to a kept generation builds nothing; a
// failed build leaves the serving generation as it was; generations beyond keep go.
func TestGenerations(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()

	rep, err := genApply(t, w, gens, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving
	if g1 == "" || rep.Generation.Building != g1 || currentLink(t, gens) != g1 {
		t.Fatalf("first apply: generation %+v, current %s", rep.Generation, currentLink(t, gens))
	}
	// The steps see the generation's folder, named by its key.
	if env := newEngine(t, w, load(t, w, fmt.Sprintf(genRecipe, gens, false)), dir, nil).EnvFor("src"); env.Generation == nil ||
		env.Generation.Dir != filepath.Join(gens, "gen", g1) {
		t.Errorf("the step's generation = %+v, want the folder of %s", env.Generation, g1)
	}

	rep, err = genApply(t, w, gens, dir, false, "pin=2")
	if err != nil {
		t.Fatal(err)
	}
	g2 := rep.Generation.Serving
	if g2 == g1 || currentLink(t, gens) != g2 {
		t.Fatalf("a new pin serves %s (was %s), current %s", g2, g1, currentLink(t, gens))
	}
	if strings.Join(sorted(w.ran), ",") != "kernel,service,src" {
		t.Errorf("a new pin ran %v, want the generation's steps and the service", w.ran)
	}
	if !strings.Contains(rep.Generation.Note, "kept "+generation.Short(g2)+", "+generation.Short(g1)) {
		t.Errorf("note %q does not say both are kept", rep.Generation.Note)
	}

	// Back to pin 1: its generation is kept, its records come back, nothing is built.
	rep, err = genApply(t, w, gens, dir, false, "pin=1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation.Serving != g1 || contains(w.ran, "src") || contains(w.ran, "kernel") {
		t.Errorf("back to pin 1: serving %s (want %s), ran %v (want no build)", rep.Generation.Serving, g1, w.ran)
	}

	// A build that fails: the serving generation stays, and so does the link.
	rep, err = genApply(t, w, gens, dir, true, "pin=3")
	if err == nil {
		t.Fatal("a failing build passed")
	}
	if rep.Generation.Serving != g1 || currentLink(t, gens) != g1 || !strings.Contains(rep.Generation.Note, "serves") {
		t.Errorf("after a failed build: %+v, current %s; want %s serving", rep.Generation, currentLink(t, gens), g1)
	}

	// Back to the serving pin after the failed build: the serving generation is reused as
	// it is; nothing is built into it.
	rep, err = genApply(t, w, gens, dir, false, "pin=1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation.Serving != g1 || contains(w.ran, "src") || contains(w.ran, "kernel") {
		t.Errorf("back to the serving pin after a failed build: serving %s (want %s), ran %v (want no build)", rep.Generation.Serving, g1, w.ran)
	}

	// A third good pin: keep 2 keeps it and pin 1 (the last two that passed); pin 2 goes.
	rep, err = genApply(t, w, gens, dir, false, "pin=4")
	if err != nil {
		t.Fatal(err)
	}
	g4 := rep.Generation.Serving
	for key, want := range map[string]bool{g1: true, g2: false, g4: true} {
		if _, err := os.Stat(filepath.Join(gens, "gen", key)); (err == nil) != want {
			t.Errorf("generation %s on disk = %v, want %v (%s)", key, err == nil, want, rep.Generation.Note)
		}
	}
	if !strings.Contains(rep.Generation.Note, "freed") {
		t.Errorf("note %q does not say what was freed", rep.Generation.Note)
	}
}

// A step that would write into a generation that has served (its outputs changed there,
// an input outside the key) is refused: the run fails naming the generation and the way
// out, nothing runs in its folder, and the generation keeps serving.
func TestServedGenerationIsReadOnly(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()
	rep, err := genApply(t, w, gens, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving
	w.broken["kernel"] = true
	rep, err = genApply(t, w, gens, dir, false)
	if err == nil {
		t.Fatal("a rebuild into the serving generation passed")
	}
	if !errors.Is(err, engine.ErrServedGeneration) && !strings.Contains(err.Error(), "has served") {
		t.Errorf("error %v does not say that the generation has served", err)
	}
	if contains(w.ran, "kernel") || contains(w.ran, "service") {
		t.Errorf("ran %v, want nothing run into the served generation", w.ran)
	}
	var msg string
	for _, s := range rep.Steps {
		if s.Name == "kernel" {
			msg = s.Error
		}
	}
	if !strings.Contains(msg, "would write into generation "+generation.Short(g1)) || !strings.Contains(msg, "outputs changed") {
		t.Errorf("the step's error %q does not name the generation and why it would run", msg)
	}
	if rep.Generation.Serving != g1 || currentLink(t, gens) != g1 {
		t.Errorf("after the refusal: %+v, current %s; want %s serving", rep.Generation, currentLink(t, gens), g1)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// A toolchain the build's generation depends on (a new nvcc) makes a new generation: the
// serving one is never rebuilt in place.
func TestGenerationKeyFollowsToolchain(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()
	w.external["kernel"] = "nvcc 13.0"
	rep, err := genApply(t, w, gens, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving
	made := filepath.Join(gens, "gen", g1, "src", "dist", "made-by-kernel")
	before, err := os.Stat(made)
	if err != nil {
		t.Fatal(err)
	}
	w.external["kernel"] = "nvcc 13.1"
	rep, err = genApply(t, w, gens, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation.Serving == g1 || !contains(w.ran, "kernel") {
		t.Fatalf("a new nvcc: serving %s (was %s), ran %v; want a new generation built", rep.Generation.Serving, g1, w.ran)
	}
	if after, err := os.Stat(made); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the old generation's build output was rewritten (%v)", err)
	}
}

// An engine made for a kept generation (GenerationKey: the daemon's roll back) works in
// that generation's folder with its kept records; once it passed, it serves: the current
// link, the record and the state say so, and the next apply of the recipe as it stands
// switches to the recipe's own generation again (gated), building nothing.
func TestRollBackToKeptGeneration(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()
	rep, err := genApply(t, w, gens, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving
	if rep, err = genApply(t, w, gens, dir, false, "pin=2"); err != nil {
		t.Fatal(err)
	}
	g2 := rep.Generation.Serving
	store, err := generation.Open(filepath.Join(gens, "gen"), filepath.Join(dir, "generations", "gen.json"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := store.Previous(); got != g1 {
		t.Fatalf("previous generation = %q, want %s (serving %s)", got, g1, store.Serving())
	}

	r := load(t, w, fmt.Sprintf(genRecipe, gens, false), "pin=2")
	e := newEngine(t, w, r, dir, func(o *engine.Options) { o.GenerationKey = g1 })
	env := e.EnvFor("service")
	if env.Generation == nil || env.Generation.Dir != filepath.Join(gens, "gen", g1) || env.Generation.Serving != g2 {
		t.Fatalf("roll-back engine's generation = %+v, want %s's folder with %s serving", env.Generation, g1, g2)
	}
	gr, err := e.GenerationPassed()
	if err != nil {
		t.Fatal(err)
	}
	if gr.Serving != g1 || currentLink(t, gens) != g1 || !strings.Contains(gr.Note, "was "+generation.Short(g2)) {
		t.Fatalf("after the roll back passed: %+v, current %s; want %s serving", gr, currentLink(t, gens), g1)
	}
	if store, err = generation.Open(filepath.Join(gens, "gen"), filepath.Join(dir, "generations", "gen.json"), 2); err != nil {
		t.Fatal(err)
	}
	if store.Serving() != g1 || store.Previous() != g2 {
		t.Errorf("record: serving %s, previous %s; want %s and %s", store.Serving(), store.Previous(), g1, g2)
	}
	// The state holds g1's records: its src step's record names g1's folder.
	st, err := engine.LoadRecipeState(dir, "gen")
	if err != nil {
		t.Fatal(err)
	}
	if rec := st.Steps["src"]; rec == nil || rec.Parts["generation.dir"] == "" {
		t.Fatalf("state after the roll back: src record %+v", rec)
	}
	next := newEngine(t, w, r, dir, nil).EnvFor("service")
	if next.Generation.Serving != g1 || next.Generation.Key != g2 {
		t.Errorf("next apply: %+v, want building %s with %s serving", next.Generation, g2, g1)
	}
	if rep, err = genApply(t, w, gens, dir, false, "pin=2"); err != nil {
		t.Fatal(err)
	}
	if rep.Generation.Serving != g2 || contains(w.ran, "src") || contains(w.ran, "kernel") {
		t.Errorf("next apply: serving %s (want %s), ran %v (want no build)", rep.Generation.Serving, g2, w.ran)
	}

	// With only one generation there is nothing to go back to.
	dir2, gens2 := t.TempDir(), t.TempDir()
	if _, err := genApply(t, w, gens2, dir2, false); err != nil {
		t.Fatal(err)
	}
	one, err := generation.Open(filepath.Join(gens2, "gen"), filepath.Join(dir2, "generations", "gen.json"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := one.Previous(); got != "" {
		t.Errorf("one generation: previous = %q, want none", got)
	}
}

// A step kind that reads one fact whatever its text says (as the build step reads the
// arch list) keys its generation by that fact alone: a driver upgrade keeps the
// generation and builds nothing; a new arch list makes a new one, and plan names it.
func TestGenerationKeyHoldsOnlyFactsRead(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()
	host := func(driver, cc string) func(*engine.Options) {
		return func(o *engine.Options) {
			reg := registry(w)
			k := reg["fake"]
			k.UsesFacts, k.Facts = true, []string{"gpu.arch_list"}
			reg["fake"] = k
			o.Registry = reg
			o.Facts = &gpu.Facts{DriverVersion: driver, CUDADriverVersion: 13000,
				GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0", ComputeCapability: cc}}}
		}
	}
	r := load(t, w, fmt.Sprintf(genRecipe, gens, false))
	rep, err := newEngine(t, w, r, dir, host("580.95.05", "12.0")).Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving

	w.ran = nil
	rep, err = newEngine(t, w, r, dir, host("590.10.01", "12.0")).Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation.Serving != g1 || contains(w.ran, "src") || contains(w.ran, "kernel") {
		t.Fatalf("a driver upgrade: serving %s (was %s), ran %v; want the same generation, nothing built", rep.Generation.Serving, g1, w.ran)
	}

	p, err := newEngine(t, w, r, dir, host("590.10.01", "9.0")).Plan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var reason string
	for _, s := range p.Steps {
		if s.Name == "kernel" {
			reason = s.Reason
		}
	}
	if !strings.Contains(reason, "kernel.gpu.arch_list") || strings.Contains(reason, "driver") {
		t.Errorf("plan after a new arch list says %q; want it to name kernel.gpu.arch_list (and not the driver)", reason)
	}
}

// Before a build, the recipe's failed generations go; the serving one stays. A build
// into a generation that runs out of disk space names `sglprov gc` and what it would free.
func TestFailedGenerationsFreedBeforeBuild(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()
	rep, err := genApply(t, w, gens, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving
	rep, err = genApply(t, w, gens, dir, true, "pin=2")
	if err == nil {
		t.Fatal("a failing build passed")
	}
	g2 := rep.Generation.Building
	if _, err := os.Stat(filepath.Join(gens, "gen", g2)); err != nil {
		t.Fatalf("the failed generation's folder: %v", err)
	}
	// Another failing pin: before it builds, the failed pin 2 goes; pin 1 serves on.
	if _, err = genApply(t, w, gens, dir, true, "pin=3"); err == nil {
		t.Fatal("a failing build passed")
	}
	if _, err := os.Stat(filepath.Join(gens, "gen", g2)); err == nil {
		t.Errorf("the failed generation %s is still on disk after the next build", g2)
	}
	if _, err := os.Stat(filepath.Join(gens, "gen", g1, "src", "made-by-src")); err != nil || currentLink(t, gens) != g1 {
		t.Errorf("the serving generation %s changed: %v, current %s", g1, err, currentLink(t, gens))
	}

	// The disk is full during the next build.
	text := strings.Replace(fmt.Sprintf(genRecipe, gens, false), `fake: {output: "{{ .vars.src }}/dist", fail: false}`, `fake: {output: "{{ .vars.src }}/dist", no_space: true}`, 1)
	_, err = newEngine(t, w, load(t, w, text, "pin=4"), dir, nil).Apply(context.Background())
	if err == nil {
		t.Fatal("a build on a full disk passed")
	}
	rep, _ = engine.LatestReport(dir)
	var msg string
	for _, s := range rep.Steps {
		if s.Name == "kernel" {
			msg = s.Error
		}
	}
	t.Logf("full disk: %s", msg)
	if !strings.Contains(msg, "sglprov gc") || !strings.Contains(msg, "is full") {
		t.Errorf("the full disk's error %q does not name sglprov gc", msg)
	}
	// It names what gc would really free: gc --dry-run's generations, the half-built one
	// among them.
	var dry strings.Builder
	if err := reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: dir, DryRun: true, Out: &dry}); err != nil {
		t.Fatal(err)
	}
	g4 := rep.Generation.Building
	if !strings.Contains(dry.String(), "would free "+generation.Short(g4)) {
		t.Fatalf("gc --dry-run does not free the half-built generation %s:\n%s", g4, dry.String())
	}
	if !strings.Contains(msg, "sglprov gc` would free") || !strings.Contains(msg, "(1 of them: "+generation.Short(g4)) {
		t.Errorf("the full disk's error %q does not say that gc would free the one generation gc --dry-run lists:\n%s", msg, dry.String())
	}
}

// promoteRecipe is genRecipe with a gate whose switch promotes the service's unit and a
// later step that fails (%v), or none run with --only smoke.
const promoteRecipe = `apiVersion: sglprov/v1
name: gen
generations: {dir: %s, keep: 2}
vars:
  pin: "1"
  src: "{{ .generation.dir }}/src"
steps:
  - name: src
    fake: {input: "{{ .vars.pin }}", output: "{{ .vars.src }}"}
  - name: service
    needs: [src]
    fake: {input: "{{ .vars.src }}/bin/python"}
  - name: smoke
    needs: [service]
    fake: {input: "{{ .vars.pin }}", promotes: true}
  - name: after
    needs: [smoke]
    fake: {input: "{{ .vars.pin }}", fail: %v}
`

// A switch that promotes the new generation's unit records the generation as serving at
// once: a later step that fails, or a run limited to the gate, leaves it recorded (and
// linked) as serving, and a gc or the next build's prune keeps it.
func TestPromotedGenerationServesAfterLaterFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail bool
		only []string
	}{
		{name: "later step fails", fail: true},
		{name: "only smoke", only: []string{"src", "service", "smoke"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			dir, gens := t.TempDir(), t.TempDir()
			rep, err := newEngine(t, w, load(t, w, fmt.Sprintf(promoteRecipe, gens, false)), dir, nil).Apply(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			g1 := rep.Generation.Serving
			rep, err = newEngine(t, w, load(t, w, fmt.Sprintf(promoteRecipe, gens, tc.fail), "pin=2"), dir,
				func(o *engine.Options) { o.Only = tc.only }).Apply(context.Background())
			if tc.fail && err == nil {
				t.Fatal("a run whose last step fails passed")
			}
			g2 := rep.Generation.Building
			if g2 == g1 || rep.Generation.Serving != g2 || currentLink(t, gens) != g2 {
				t.Fatalf("after the switch promoted %s: %+v, current %s; want %s serving", g2, rep.Generation, currentLink(t, gens), g2)
			}
			// gc, with keep 1: the promoted generation serves and stays.
			store, err := generation.Open(filepath.Join(gens, "gen"), filepath.Join(dir, "generations", "gen.json"), 1)
			if err != nil {
				t.Fatal(err)
			}
			if store.Serving() != g2 {
				t.Fatalf("the record says %s serves, want the promoted %s", store.Serving(), g2)
			}
			if _, err := store.Prune(false); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(gens, "gen", g2, "src", "made-by-src")); err != nil {
				t.Errorf("gc removed the promoted generation %s: %v", g2, err)
			}
			// The next build's prune keeps it too.
			if _, err := newEngine(t, w, load(t, w, fmt.Sprintf(promoteRecipe, gens, true), "pin=3"), dir, nil).Apply(context.Background()); err == nil {
				t.Fatal("a run whose last step fails passed")
			}
			if _, err := os.Stat(filepath.Join(gens, "gen", g2, "src", "made-by-src")); err != nil {
				t.Errorf("the next build removed the promoted generation %s: %v", g2, err)
			}
		})
	}
}

// A node left drained by a switch that did not end (the record that it is owed an
// undrain) is undrained by the next run whose gate passes, and not by one that fails.
func TestOwedUndrainPaidByTheNextRunThatPasses(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()
	if _, err := genApply(t, w, gens, dir, false); err != nil {
		t.Fatal(err)
	}
	if err := engine.MarkUndrainOwed(dir, "gen", "switching gen"); err != nil {
		t.Fatal(err)
	}
	gated := func(fail bool, sets ...string) *recipe.Recipe {
		r := fmt.Sprintf(genRecipe, gens, fail) + `  - name: smoke
    needs: [service]
    fake: {gate: true}
`
		return load(t, w, r, sets...)
	}
	undrained := 0
	withHooks := func(o *engine.Options) {
		o.Undrain = func(context.Context) error { undrained++; return nil }
		o.Drain = func(context.Context) error { return nil }
	}
	// A build that fails: what serves was not gated in this run; the node stays drained.
	if _, err := newEngine(t, w, gated(true, "pin=9"), dir, withHooks).Apply(context.Background()); err == nil {
		t.Fatal("a failing build passed")
	}
	if undrained != 0 || !engine.UndrainOwed(dir, "gen") {
		t.Fatalf("after a failed run: undrained %d times, owed %v; want 0, still owed", undrained, engine.UndrainOwed(dir, "gen"))
	}
	if _, err := newEngine(t, w, gated(false), dir, withHooks).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if undrained != 1 || engine.UndrainOwed(dir, "gen") {
		t.Errorf("after a run that passed: undrained %d times, owed %v; want 1, not owed", undrained, engine.UndrainOwed(dir, "gen"))
	}
	// Nothing owed: nothing run.
	if _, err := newEngine(t, w, gated(false), dir, withHooks).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if undrained != 1 {
		t.Errorf("a run with nothing owed undrained (%d times)", undrained)
	}
}

// The generation the installed unit runs serves, whatever the record says (a switch
// killed after its promotion, before the record): the next build's freeing keeps it and
// records it as serving, saying so, and gc would not free it.
func TestInstalledUnitsGenerationIsNeverFreed(t *testing.T) {
	w := newWorld()
	dir, gens := t.TempDir(), t.TempDir()
	text := func(fail bool) string {
		r := fmt.Sprintf(genRecipe, gens, fail)
		return strings.Replace(r, `fake: {input: "{{ .vars.src }}/bin/python"}`, `fake: {input: "{{ .vars.src }}/bin/python", unit: sglang.service, manager: exec}`, 1)
	}
	rep, err := newEngine(t, w, load(t, w, text(false)), dir, nil).Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g1 := rep.Generation.Serving
	rep, _ = newEngine(t, w, load(t, w, text(true), "pin=2"), dir, nil).Apply(context.Background())
	g2 := rep.Generation.Building
	// The unit that serves runs generation 2; the record still names generation 1.
	unit := fmt.Sprintf("[Service]\nExecStart=%s/gen/%s/src/bin/python -m sglang.launch_server\n", gens, g2)
	if err := os.MkdirAll(filepath.Join(dir, "units"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "units", "sglang.service.last-known-good"), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	var dry strings.Builder
	if err := reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: dir, DryRun: true, Out: &dry}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dry.String(), "would free "+generation.Short(g2)) || !strings.Contains(dry.String(), "installed unit runs generation "+generation.Short(g2)) {
		t.Errorf("gc --dry-run would free the generation the unit runs, or does not say it serves:\n%s", dry.String())
	}
	rep, err = newEngine(t, w, load(t, w, text(true), "pin=3"), dir, nil).Apply(context.Background())
	if err == nil {
		t.Fatal("a failing build passed")
	}
	for _, key := range []string{g1, g2} {
		if _, err := os.Stat(filepath.Join(gens, "gen", key)); err != nil {
			t.Errorf("generation %s was freed: %v", generation.Short(key), err)
		}
	}
	if !strings.Contains(rep.Generation.Note, "recorded "+generation.Short(g2)+" as serving") || rep.Generation.Serving != g2 {
		t.Errorf("the run's note %q (serving %s) does not say that generation 2 serves", rep.Generation.Note, rep.Generation.Serving)
	}
	if currentLink(t, gens) != g2 {
		t.Errorf("current -> %s, want %s", currentLink(t, gens), g2)
	}
}
