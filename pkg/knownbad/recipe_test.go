package knownbad_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/knownbad"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// checkRecipe loads the recipe at path with sets and checks it, with a stand-in host that
// meets its requirements, as validate does without GPU facts.
func checkRecipe(t *testing.T, path string, sets ...string) error {
	t.Helper()
	r, err := recipe.Load(path, steps.Specs(steps.Registry()), sets)
	if err != nil {
		t.Fatal(err)
	}
	facts := gpu.StandIn(r.Requires)
	var ccs []string
	for _, g := range facts.GPUs {
		ccs = append(ccs, g.ComputeCapability)
	}
	return knownbad.CheckRecipe(r, facts.TemplateData(), ccs)
}

// TestCheckRecipe: the shipped SM120 recipe with each known-bad combination set into its
// pins or launch line is refused (a usage error) naming the row and its fix; as shipped it
// passes. A recipe pinning nvidia-cutlass-dsl 4.5.0 for SM120 is refused the same way.
func TestCheckRecipe(t *testing.T) {
	sm120 := filepath.Join("..", "..", "recipes", "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	if err := checkRecipe(t, sm120); err != nil {
		t.Fatalf("as shipped: %v", err)
	}
	dsl := filepath.Join(t.TempDir(), "dsl.yaml")
	if err := os.WriteFile(dsl, []byte(`apiVersion: sglprov/v1
name: dsl
requires:
  gpu: {compute_capability: "12.0"}
steps:
  - name: dsl
    command:
      argv: [/opt/v/bin/python, -m, pip, install, "nvidia-cutlass-dsl==4.5.0"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		sets []string
		row  string
	}{
		{sm120, []string{"cudnn_version=9.21.0.48"}, "cudnn-fp4-gemm-nan"},
		{sm120, []string{"flashinfer_version=0.6.18rc5"}, "flashinfer-0.6.18rc-sm12x-moe"},
		{sm120, []string{"kv_cache_dtype=fp4_e2m1"}, "fp4-kv-cache-sm12x"},
		{dsl, nil, "cutlass-dsl-4.5.0-sm12x"},
	} {
		err := checkRecipe(t, tc.path, tc.sets...)
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "["+tc.row+"]") || !strings.Contains(err.Error(), "fix: ") {
			t.Errorf("%s %v: %v, want a usage error naming %s", filepath.Base(tc.path), tc.sets, err, tc.row)
		}
	}
}
