package recipe_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/recipe"
)

var update = flag.Bool("update", false, "rewrite golden files")

// command is a test kind's spec, shaped like the command step's.
type command struct {
	Argv    []string          `yaml:"argv"`
	Dir     string            `yaml:"dir"`
	Env     map[string]string `yaml:"env"`
	Creates []string          `yaml:"creates"`
}

// testKinds stands in for the registry: two kinds with strict specs.
func testKinds() recipe.KindSpecs {
	type source struct {
		URL  string `yaml:"url"`
		Dest string `yaml:"dest"`
	}
	return recipe.KindSpecs{
		"command": func() any { return &command{} },
		"source":  func() any { return &source{} },
	}
}

// TestBadRecipes checks the full validation report of each broken recipe against its
// golden file (go test -update rewrites them).
func TestBadRecipes(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) < 8 {
		t.Fatalf("only %d bad recipes", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			_, err := recipe.Load(f, testKinds(), nil)
			if err == nil {
				t.Fatal("no error")
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, _ := os.ReadFile(golden)
			if d := cmp.Diff(string(want), got); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
		})
	}
}

func TestSetsAndRender(t *testing.T) {
	text := `apiVersion: sglprov/v1
name: t
vars:
  src: /opt/sglang
  tp: "{{ .gpu.count }}"
steps:
  - name: a
    command:
      argv: [run, --tp, "{{ .vars.tp }}", "{{ .vars.src }}/x"]
`
	r, err := recipe.Parse("t.yaml", []byte(text), testKinds(), []string{"src=/srv/sglang"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.NeedsFacts() {
		t.Error("a var that uses .gpu.count needs facts")
	}
	d, err := r.NewData(map[string]any{"gpu": map[string]any{"count": 8}})
	if err != nil {
		t.Fatal(err)
	}
	spec := testKinds()["command"]()
	if err := r.Steps[0].Render(d, spec); err != nil {
		t.Fatal(err)
	}
	got := spec.(*command).Argv
	if d := cmp.Diff([]string{"run", "--tp", "8", "/srv/sglang/x"}, got); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"gpu.count", "vars.src", "vars.tp"}, r.ExpandRefs(r.Steps[0])); d != "" {
		t.Errorf("refs (-want +got):\n%s", d)
	}
	// Without facts, a template that needs one fails with a clear error.
	d2, err := r.NewData(nil)
	if err == nil {
		err = r.Steps[0].Render(d2, testKinds()["command"]())
	}
	if err == nil || !strings.Contains(err.Error(), "GPU facts") {
		t.Errorf("render without facts: %v", err)
	}
}

// A --set value that is not UTF-8 is refused as a problem of the recipe (exit 2), naming
// the var and the bytes: a recipe file cannot hold such a value either, and it would reach
// the unit, the logs and the metrics' labels as it is.
func TestSetNotUTF8(t *testing.T) {
	text := "apiVersion: sglprov/v1\nname: t\nvars:\n  served_name: qwen\nsteps:\n  - name: a\n    command:\n      argv: [run, \"{{ .vars.served_name }}\"]\n"
	_, err := recipe.Parse("t.yaml", []byte(text), testKinds(), []string{"served_name=qw\xffen"})
	want := `--set: --set served_name: the value "qw\xffen" is not valid UTF-8: give it in UTF-8`
	var ps recipe.Problems
	if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &ps) {
		t.Errorf("Parse: %v, want the problem %q", err, want)
	}
	if _, err := recipe.Parse("t.yaml", []byte(text), testKinds(), []string{"served_name=qwén"}); err != nil {
		t.Errorf("a UTF-8 value: %v", err)
	}
}

// FuzzParse feeds arbitrary recipes to the parser: it must return a recipe or problems,
// never panic, and every problem must carry the file name.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/bad/*.yaml")
	seeds = append(seeds, "../../recipes/qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("apiVersion: sglprov/v1\nname: x\nsteps: []\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := recipe.Parse("fuzz.yaml", data, testKinds(), nil)
		if err != nil {
			if ps, ok := err.(recipe.Problems); ok {
				for _, p := range ps {
					if p.File != "fuzz.yaml" && p.File != "--set" {
						t.Fatalf("problem without the file: %+v", p)
					}
				}
			}
			return
		}
		if r == nil {
			t.Fatal("nil recipe without error")
		}
	})
}

func TestVarsChainAndCycle(t *testing.T) {
	text := `apiVersion: sglprov/v1
name: t
vars:
  c: "{{ .vars.b }}/c"
  b: "{{ .vars.a }}/b"
  a: "{{ .gpu.count }}"
steps:
  - name: s
    command: {argv: ["{{ .vars.c }}"]}
`
	r, err := recipe.Parse("t.yaml", []byte(text), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.NewData(map[string]any{"gpu": map[string]any{"count": 8}})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Vars()["c"]; got != "8/b/c" {
		t.Errorf("c = %q, want 8/b/c", got)
	}
	cyclic := strings.Replace(text, `a: "{{ .gpu.count }}"`, `a: "{{ .vars.c }}"`, 1)
	_, err = recipe.Parse("t.yaml", []byte(cyclic), testKinds(), nil)
	if err == nil || !strings.Contains(err.Error(), "vars refer to each other in a cycle: c -> b -> a -> c") {
		t.Errorf("cycle: %v", err)
	}
	self := strings.Replace(text, `a: "{{ .gpu.count }}"`, `a: "{{ .vars.a }}x"`, 1)
	if _, err := recipe.Parse("t.yaml", []byte(self), testKinds(), nil); err == nil || !strings.Contains(err.Error(), "cycle: a -> a") {
		t.Errorf("self reference: %v", err)
	}
}

func TestRequiresCommands(t *testing.T) {
	text := `apiVersion: sglprov/v1
name: t
requires:
  commands:
    nvcc: {version: ">=12.8"}
    git: {}
steps:
  - name: a
    command: {argv: [true]}
`
	r, err := recipe.Parse("t.yaml", []byte(text), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Commands["nvcc"].Version != ">=12.8" || len(r.Commands) != 2 {
		t.Errorf("commands = %+v", r.Commands)
	}
	if r.NeedsFacts() {
		t.Error("a recipe that requires only commands asks for GPU facts")
	}
	bad := `apiVersion: sglprov/v1
name: t
requires:
  cuda: ">=12.8"
  commands:
    nvcc: {version: ">=12.8,,"}
    /usr/bin/git: {}
    cmake: {versoin: "3"}
    ninja: {version: ">=1.11"}
steps:
  - name: a
    command: {argv: [true]}
`
	_, err = recipe.Parse("t.yaml", []byte(bad), testKinds(), nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`t.yaml:6:21: invalid version range ">=12.8,,": empty constraint at offset 7 (at requires.commands.nvcc.version)`,
		`t.yaml:7:5: "/usr/bin/git" is not a command name`,
		`t.yaml:8:13: unknown field "versoin" (known: version) (at requires.commands.cmake.versoin)`,
		// A range sglprov cannot check on any host is the recipe's error, not the host's.
		`t.yaml:9:22: sglprov cannot read the version of ninja (it reads c++, cc, cmake, g++, gcc, git, nvcc, python, python3): drop the version range, or check it in a command step (at requires.commands.ninja.version)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestValidatePolicies(t *testing.T) {
	if err := (recipe.GPURequirements{ECC: "off"}).ValidatePolicies(); err == nil || err.Error() != `requires.gpu.ecc: "off" is not one of refuse, warn, ignore` {
		t.Errorf("ValidatePolicies = %v", err)
	}
	if err := (recipe.GPURequirements{MIG: recipe.PolicyAllow, P2P: recipe.PolicyRefuse}).ValidatePolicies(); err != nil {
		t.Errorf("ValidatePolicies = %v", err)
	}
	if got := (recipe.GPURequirements{}).Policy("p2p"); got != recipe.PolicyIgnore {
		t.Errorf("default p2p policy = %q, want ignore", got)
	}
}
