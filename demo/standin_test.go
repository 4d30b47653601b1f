package demo

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestStandInsMatchTheSM120Recipe: the demo recipe asks of the host what the shipped SM120
// recipe asks (driver, CUDA, nvcc), and run.sh's nvcc stand-in prints the real version
// output of the toolkit that recipe requires, so the demo shows the node the recipe needs.
func TestStandInsMatchTheSM120Recipe(t *testing.T) {
	type requires struct {
		Requires struct {
			Driver   string `yaml:"driver"`
			CUDA     string `yaml:"cuda"`
			Commands map[string]struct {
				Version string `yaml:"version"`
			} `yaml:"commands"`
		} `yaml:"requires"`
	}
	read := func(name string) requires {
		b, err := os.ReadFile(filepath.Join("..", "recipes", name))
		if err != nil {
			t.Fatal(err)
		}
		var r requires
		if err := yaml.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	demo, sm120 := read("demo.yaml").Requires, read("qwen3.5-397b-a17b-nvfp4-sm120.yaml").Requires
	if demo.Driver != sm120.Driver || demo.CUDA != sm120.CUDA || demo.Commands["nvcc"] != sm120.Commands["nvcc"] {
		t.Errorf("demo.yaml requires driver %q, cuda %q, nvcc %q; the SM120 recipe %q, %q, %q",
			demo.Driver, demo.CUDA, demo.Commands["nvcc"].Version, sm120.Driver, sm120.CUDA, sm120.Commands["nvcc"].Version)
	}
	want := strings.TrimPrefix(sm120.Commands["nvcc"].Version, ">=")
	script, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cp pkg/hostcmd/testdata/(nvcc-[0-9.]+\.txt) `).FindSubmatch(script)
	if m == nil {
		t.Fatal("run.sh copies no nvcc version output from pkg/hostcmd/testdata")
	}
	out, err := os.ReadFile(filepath.Join("..", "pkg", "hostcmd", "testdata", string(m[1])))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "release "+want+",") {
		t.Errorf("run.sh's nvcc stand-in (%s) is not the %s toolkit the SM120 recipe requires:\n%s", m[1], want, out)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), string(m[1])) {
		t.Errorf("demo/README.md does not name the stand-in %s", m[1])
	}
}
