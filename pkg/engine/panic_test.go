package engine_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// panickySpec is the body of a step that dereferences a nil pointer, in Run or in
// Intact, as the download step's cache code once did.
type panickySpec struct {
	In string `yaml:"in"` // "run", "intact" or "fingerprint"
}

type panickyStep struct{ spec panickySpec }

type nothing struct{ field string }

func (p *panickyStep) boom() error {
	var n *nothing
	return errors.New(n.field)
}

func (p *panickyStep) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	if p.spec.In == "fingerprint" {
		return nil, p.boom()
	}
	return nil, nil
}

func (p *panickyStep) Intact(context.Context, *engine.Env) (bool, string, error) {
	if p.spec.In == "intact" {
		return false, "", p.boom()
	}
	return false, "never intact", nil
}

func (p *panickyStep) Run(context.Context, *engine.Env) error {
	if p.spec.In == "run" {
		return p.boom()
	}
	return nil
}

// A step that panics is a failed step: the other steps still run, the stack is in its
// step log, the state records it failed, and the run's exit code is 1.
func TestAStepThatPanicsFailsTheStep(t *testing.T) {
	for _, in := range []string{"run", "intact"} {
		t.Run(in, func(t *testing.T) {
			w := newWorld()
			reg, specs := panickyRegistry(w)
			text := "apiVersion: sglprov/v1\nname: p\nsteps:\n  - name: bad\n    panicky: {in: " + in + "}\n  - name: good\n    fake: {}\n  - name: after\n    needs: [bad]\n    fake: {}\n"
			r, err := recipe.Parse("test.yaml", []byte(text), specs, nil)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if in == "intact" {
				// Intact is asked only of a step recorded ok with the same fingerprint.
				if _, err := newEngine(t, w, r, dir, func(o *engine.Options) { o.Registry = reg }).Apply(context.Background()); err != nil {
					t.Fatalf("first apply: %v", err)
				}
			}
			rep, err := newEngine(t, w, r, dir, func(o *engine.Options) { o.Registry = reg }).Apply(context.Background())
			var pe *engine.PanicError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), "panicked") {
				t.Fatalf("Apply = %v, want the step's panic as its failure", err)
			}
			if code := exitcode.Of(err); code != 1 || rep.ExitCode != 1 {
				t.Errorf("exit code %d (report %d), want 1", code, rep.ExitCode)
			}
			got := results(rep)
			if got["bad"] != engine.ResultFailed || (got["good"] != engine.ResultOK && got["good"] != engine.ResultSkipped) || got["after"] != engine.ResultBlocked {
				t.Errorf("results = %v", got)
			}
			var bad *engine.StepReport
			for _, s := range rep.Steps {
				if s.Name == "bad" {
					bad = s
				}
			}
			b, rerr := os.ReadFile(bad.Log)
			if rerr != nil || !strings.Contains(string(b), "nil pointer dereference") || !strings.Contains(string(b), "panickyStep") {
				t.Errorf("the step log %q does not hold the stack (%v):\n%s", bad.Log, rerr, b)
			}
			if in == "run" {
				st, err := engine.LoadState(dir)
				if err != nil {
					t.Fatal(err)
				}
				if rec := st.Steps["bad"]; rec == nil || rec.Result != engine.ResultFailed || !strings.Contains(rec.Error, "panicked") {
					t.Errorf("state records %+v", rec)
				}
			}
		})
	}
}

// A step that panics while plan asks it is that step's error in the plan (the table still
// shows every step), never a dead plan.
func TestAStepThatPanicsInPlan(t *testing.T) {
	w := newWorld()
	reg, specs := panickyRegistry(w)
	text := "apiVersion: sglprov/v1\nname: p\nsteps:\n  - name: bad\n    panicky: {in: fingerprint}\n  - name: good\n    fake: {}\n"
	r, err := recipe.Parse("test.yaml", []byte(text), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newEngine(t, w, r, t.TempDir(), func(o *engine.Options) { o.Registry = reg }).Plan(context.Background())
	if p == nil || len(p.Steps) != 2 {
		t.Fatalf("Plan = %+v, %v: want both steps", p, err)
	}
	if !strings.Contains(p.Steps[0].Error, "panicked while planning") {
		t.Errorf("bad step's error = %q", p.Steps[0].Error)
	}
	if p.Steps[1].Error != "" || !p.Steps[1].Run {
		t.Errorf("good step = %+v", p.Steps[1])
	}
}

// panickyRegistry is the test registry with the panicky step kind, and its specs.
func panickyRegistry(w *world) (engine.Registry, recipe.KindSpecs) {
	reg := registry(w)
	reg["panicky"] = engine.Kind{
		NewSpec: func() any { return &panickySpec{} },
		New: func(name string, spec any) (engine.Step, error) {
			return &panickyStep{spec: *spec.(*panickySpec)}, nil
		},
	}
	specs := recipe.KindSpecs{}
	for k, v := range reg {
		specs[k] = v.NewSpec
	}
	return reg, specs
}
