package cli

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// probeStep records the requirements CheckCommands gives it.
type probeStep struct {
	got  recipe.CommandRequirements
	look hostcmd.Looker
}

func (p *probeStep) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (p *probeStep) Intact(context.Context, *engine.Env) (bool, string, error) { return true, "", nil }
func (p *probeStep) Run(context.Context, *engine.Env) error                    { return nil }
func (p *probeStep) CheckCommands(r recipe.CommandRequirements, l hostcmd.Looker) {
	p.got, p.look = r, l
}

// TestGiveCommands: the recipe's requires.commands reach every built step that checks the
// commands it installs (the packages step), with the looker the preflight used.
func TestGiveCommands(t *testing.T) {
	reg := steps.Registry()
	var built []*probeStep
	reg["probe"] = engine.KindOf(func(name string, s struct {
		X string `yaml:"x"`
	}) (*probeStep, error) {
		p := &probeStep{}
		built = append(built, p)
		return p, nil
	})
	dir := t.TempDir()
	r, err := recipe.Parse(filepath.Join(dir, "r.yaml"), []byte(`apiVersion: sglprov/v1
name: give
requires:
  commands:
    cmake: {version: ">=3.26"}
steps:
  - name: tools
    probe: {x: y}
  - name: host-packages
    packages:
      apt: [cmake]
`), steps.Specs(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Recipe: r, RecipeDir: dir, Registry: reg, StateDir: filepath.Join(dir, "state"), Root: filepath.Join(dir, "root")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	look := hostcmd.PathLooker{Path: dir}
	e.GiveCommands(r.Commands, look)
	if len(built) != 1 || !reflect.DeepEqual(built[0].got, r.Commands) {
		t.Fatalf("probe step got %+v, want %+v", built, r.Commands)
	}
	if l, ok := built[0].look.(hostcmd.PathLooker); !ok || l.Path != dir {
		t.Errorf("probe step's looker = %#v, want the PATH %s", built[0].look, dir)
	}
}
