package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// envStep is a fake Python step: an engine.AfterGatePublisher whose Publish pushes a real
// artifact (one layer) under the step's tag, as the Python step pushes its environment.
type envStep struct {
	fakeStep
	pushed int
}

func (s *envStep) PublishesAfterGate() bool { return true }

func (s *envStep) Publish(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	s.pushed++
	p := filepath.Join(env.StateDir, "layer.tar")
	if err := os.WriteFile(p, []byte("an environment's tree"), 0o600); err != nil {
		return "", err
	}
	sum, size, err := cache.FileSHA256(p)
	if err != nil {
		return "", err
	}
	a, err := slot.Cache.Push(ctx, slot.Tag, "application/vnd.sglprov.pyenv.v1", []byte(`{}`), []cache.File{{Name: "layer.tar", Path: p, Size: size, SHA256: sum, Mode: 0o644}})
	if err != nil {
		return "", err
	}
	return a.Digest, nil
}

// TestEnvironmentPushedOnlyOnceTheGatePassed: on a pushing node with a real registry, the
// environment of a step that the gate needs (through the server's step) is not pushed
// when the gate fails; the next run, whose gate passes, pushes it (the step up to date);
// a recipe with no gate pushes it after the step's own run, as before.
func TestEnvironmentPushedOnlyOnceTheGatePassed(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/env", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var steps []*envStep
	reg2 := func(w *world) engine.Registry {
		r := registry(w)
		r["env"] = engine.Kind{
			NewSpec: func() any { return &fakeSpec{} },
			New: func(name string, spec any) (engine.Step, error) {
				s := &envStep{fakeStep: fakeStep{name: name, spec: *spec.(*fakeSpec), w: w}}
				steps = append(steps, s)
				return s, nil
			},
		}
		return r
	}
	apply := func(dir, text string) (*engine.Engine, *engine.Report, error) {
		w := newWorld()
		specs := recipe.KindSpecs{}
		for k, v := range reg2(w) {
			specs[k] = v.NewSpec
		}
		r, err := recipe.Parse("test.yaml", []byte(text), specs, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(engine.Options{Recipe: r, Registry: reg2(w), StateDir: dir, Cache: c})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := e.Apply(ctx)
		return e, rep, err
	}
	gated := func(fail bool) string {
		return fmt.Sprintf(`apiVersion: sglprov/v1
name: t
steps:
  - name: python
    env: {input: "wheels"}
  - name: server
    needs: [python]
    fake: {}
  - name: gate
    needs: [server]
    fake: {gate: true, fail: %v}
`, fail)
	}
	report := func(rep *engine.Report, name string) *engine.StepReport {
		for _, s := range rep.Steps {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no step %s in the report", name)
		return nil
	}

	dir := t.TempDir()
	e, rep, err := apply(dir, gated(true))
	if err == nil {
		t.Fatal("the failing gate's run succeeded")
	}
	py := e.State().Steps["python"]
	if py == nil || py.Result != engine.ResultOK || py.Fingerprint == "" {
		t.Fatalf("the Python step's record: %+v", py)
	}
	tag := py.Fingerprint
	if a, err := c.Lookup(ctx, tag); err != nil || a != nil {
		t.Fatalf("after a failed gate the registry holds %v (%v); want no environment", a, err)
	}
	if s := steps[len(steps)-1]; s.pushed != 0 || report(rep, "python").Pushed != "" {
		t.Errorf("after a failed gate: %d pushes, report pushed %q", s.pushed, report(rep, "python").Pushed)
	}

	_, rep, err = apply(dir, gated(false))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatalf("after the gate passed: %v %v; want the environment pushed", a, err)
	}
	if got := report(rep, "python"); got.Result != engine.ResultSkipped || got.Pushed != a.Digest {
		t.Errorf("after the gate passed: python %s, pushed %q, want skipped and %s", got.Result, got.Pushed, a.Digest)
	}

	// No gate needs the step: it pushes after its own run.
	noGate := `apiVersion: sglprov/v1
name: t
steps:
  - name: python
    env: {input: "other wheels"}
  - name: server
    needs: [python]
    fake: {fail: true}
`
	e, rep, err = apply(t.TempDir(), noGate)
	if err == nil {
		t.Fatal("the failing server's run succeeded")
	}
	if a, err := c.Lookup(ctx, e.State().Steps["python"].Fingerprint); err != nil || a == nil || report(rep, "python").Pushed != a.Digest {
		t.Errorf("without a gate: %v %v, report pushed %q", a, err, report(rep, "python").Pushed)
	}
}
