package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/switchover"
)

type seamSpec struct {
	Unit     string   `yaml:"unit"`
	Model    string   `yaml:"model"`
	Restarts int      `yaml:"restarts"`
	Bad      string   `yaml:"bad"`
	Installs []string `yaml:"installs"`
	Provides []string `yaml:"provides"`
	NoPM     bool     `yaml:"no_pm"`
}

// seamStep is a plain step; svcStep adds the service seams, pkgStep the command ones.
type seamStep struct{ spec seamSpec }

func (s *seamStep) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (s *seamStep) Intact(context.Context, *engine.Env) (bool, string, error) { return true, "", nil }
func (s *seamStep) Run(context.Context, *engine.Env) error                    { return nil }

type svcStep struct{ seamStep }

func (s *svcStep) ServiceName() string                                             { return s.spec.Unit }
func (s *svcStep) Candidates(*engine.Env) []string                                 { return nil }
func (s *svcStep) Active(*engine.Env) string                                       { return "" }
func (s *svcStep) Restart(context.Context, *engine.Env) error                      { return nil }
func (s *svcStep) Failed(context.Context) (bool, string, error)                    { return false, "", nil }
func (s *svcStep) Switched(context.Context, *engine.Env, *switchover.Result) error { return nil }
func (s *svcStep) Switch(context.Context, *engine.Env, []string) (*switchover.Switch, error) {
	return nil, errors.New("not in this test")
}
func (s *svcStep) ServedModel(*engine.Env) (string, string, error) {
	return s.spec.Model, "/models/" + s.spec.Model, nil
}
func (s *svcStep) ServerRestarts() (int, bool) { return s.spec.Restarts, true }
func (s *svcStep) KnownBad(*engine.Env) error {
	if s.spec.Bad == "" {
		return nil
	}
	return fmt.Errorf("%w: %s", exitcode.ErrHost, s.spec.Bad)
}

type pkgStep struct {
	seamStep
	required recipe.CommandRequirements
}

func (s *pkgStep) Installs(context.Context, *engine.Env) ([]string, error) {
	if s.spec.NoPM {
		return nil, errors.New("no package manager here")
	}
	return s.spec.Installs, nil
}
func (s *pkgStep) Provides() []string { return s.spec.Provides }
func (s *pkgStep) CheckCommands(r recipe.CommandRequirements, _ hostcmd.Looker) {
	s.required = r
}

// TestSeams: the engine answers what the command layer and the daemon ask of its steps
// (the service, its served model and restarts, the known-bad check, the commands the
// steps install) through the named seams, in file order, whatever the steps' kinds are
// called.
func TestSeams(t *testing.T) {
	built := map[string]engine.Step{}
	reg := engine.Registry{
		"plain": engine.KindOf(func(n string, s seamSpec) (*seamStep, error) { st := &seamStep{s}; built[n] = st; return st, nil }),
		"svc": engine.KindOf(func(n string, s seamSpec) (*svcStep, error) {
			st := &svcStep{seamStep{s}}
			built[n] = st
			return st, nil
		}),
		"pkgs": engine.KindOf(func(n string, s seamSpec) (*pkgStep, error) {
			st := &pkgStep{seamStep: seamStep{s}}
			built[n] = st
			return st, nil
		}),
	}
	specs := recipe.KindSpecs{}
	for k, v := range reg {
		specs[k] = v.NewSpec
	}
	r, err := recipe.Parse("t.yaml", []byte(`apiVersion: sglprov/v1
name: t
steps:
  - name: tools
    pkgs: {installs: [git], provides: [git, cmake]}
  - name: more-tools
    pkgs: {no_pm: true, provides: [cmake, ninja]}
  - name: other
    plain: {}
  - name: first
    svc: {unit: a.service, model: qwen, restarts: 3, bad: "flashinfer 0.2 on sm120"}
  - name: second
    svc: {unit: b.service, model: llama}
`), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	var names []string
	for _, s := range e.Services() {
		names = append(names, s.Name+"="+s.Step.ServiceName())
	}
	if diff := cmp.Diff([]string{"first=a.service", "second=b.service"}, names); diff != "" {
		t.Errorf("Services (-want +got):\n%s", diff)
	}
	svc, ok := e.Service()
	if !ok || svc.Name != "first" || svc.Env == nil {
		t.Fatalf("Service = %+v, %v; want the first service step with its Env", svc, ok)
	}
	if name, path, ok, err := svc.ServedModel(); !ok || err != nil || name != "qwen" || path != "/models/qwen" {
		t.Errorf("ServedModel = %q, %q, %v, %v", name, path, ok, err)
	}
	if n, ok := e.ServerRestarts(); !ok || n != 3 {
		t.Errorf("ServerRestarts = %d, %v; want 3, true", n, ok)
	}
	if err := e.KnownBad(); !errors.Is(err, exitcode.ErrHost) || err.Error() != "step first: host does not meet the recipe's requirements: flashinfer 0.2 on sm120" {
		t.Errorf("KnownBad = %v", err)
	}
	// tools can tell what it installs now (git); more-tools cannot, so all it may install.
	want := map[string]string{"git": "tools", "cmake": "more-tools", "ninja": "more-tools"}
	if diff := cmp.Diff(want, e.ProvidedCommands(context.Background())); diff != "" {
		t.Errorf("ProvidedCommands (-want +got):\n%s", diff)
	}
	req := recipe.CommandRequirements{"git": {Version: ">=2.30"}}
	e.GiveCommands(req, nil)
	for _, n := range []string{"tools", "more-tools"} {
		if got := built[n].(*pkgStep).required; !cmp.Equal(got, req) {
			t.Errorf("step %s was given %v, want %v", n, got, req)
		}
	}

	var none *engine.Engine
	if got := none.ProvidedCommands(context.Background()); len(got) != 0 {
		t.Errorf("ProvidedCommands of no engine = %v", got)
	}
}
