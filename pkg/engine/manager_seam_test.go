package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
)

// managedStep makes its service manager through the Env (as the systemd step does), and
// gates when gate is set (as the smoke step does).
type managedStep struct {
	gate bool
	got  *[]service.Manager
}

func (s *managedStep) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (s *managedStep) Intact(context.Context, *engine.Env) (bool, string, error) {
	return false, "never", nil
}
func (s *managedStep) Run(ctx context.Context, env *engine.Env) error {
	if s.gate {
		return nil
	}
	m, err := env.ServiceManager(ctx, service.KindExec)
	if err != nil {
		return err
	}
	*s.got = append(*s.got, m)
	return nil
}

type managedGate struct{ managedStep }

func (managedGate) Gates() bool { return true }

// TestServiceManagerSeam: a step's service manager comes from the engine's
// Options.NewManager, with the env's host and state dir; a run's report marks the gate
// steps (Gate interface) without the kind's name, and report.json does not carry it.
func TestServiceManagerSeam(t *testing.T) {
	var got []service.Manager
	reg := engine.Registry{
		"svc": {NewSpec: func() any { return &struct{}{} }, New: func(string, any) (engine.Step, error) {
			return &managedStep{got: &got}, nil
		}},
		"check": {NewSpec: func() any { return &struct{}{} }, New: func(string, any) (engine.Step, error) {
			return &managedGate{managedStep{gate: true}}, nil
		}},
	}
	specs := recipe.KindSpecs{}
	for k, v := range reg {
		specs[k] = v.NewSpec
	}
	r, err := recipe.Parse("test.yaml", []byte("apiVersion: sglprov/v1\nname: m\nsteps:\n  - name: unit\n    svc: {}\n  - name: gate\n    needs: [unit]\n    check: {}\n"), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fake := service.NewOffline(t.TempDir())
	var opts []service.Options
	e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: dir, NewManager: func(_ context.Context, o service.Options) (service.Manager, error) {
		opts = append(opts, o)
		return fake, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rep, err := e.Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != fake || len(opts) != 1 || opts[0].Kind != service.KindExec || opts[0].StateDir != dir {
		t.Fatalf("the step's manager did not come from Options.NewManager: managers %v, options %+v", got, opts)
	}
	gates := map[string]bool{}
	for _, s := range rep.Steps {
		gates[s.Name] = s.Gate
	}
	if !gates["gate"] || gates["unit"] {
		t.Errorf("report's gate marks = %v, want gate alone", gates)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"gate":true`) || strings.Contains(string(b), `"Gate"`) {
		t.Errorf("report.json carries the gate mark: %s", b)
	}
}
