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

// TestCheckRecipe: the shipped SM120 recipes pass as shipped; the early one (FlashInfer
// 0.6.8) with a cuDNN FP4 GEMM profile put back in its service's list is refused (a usage
// error) naming the row and its fix. A recipe pinning nvidia-cutlass-dsl 4.5.0 for SM120 is
// refused the same way.
func TestCheckRecipe(t *testing.T) {
	sm120 := filepath.Join("..", "..", "recipes", "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	for _, f := range []string{"qwen3.5-397b-a17b-nvfp4-sm120.yaml", "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml", "qwen3.5-397b-a17b-nvfp4-sm120-2node.yaml",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml"} {
		if err := checkRecipe(t, filepath.Join("..", "..", "recipes", f)); err != nil {
			t.Errorf("%s as shipped: %v", f, err)
		}
	}
	b, err := os.ReadFile(sm120)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "      profiles: [sm120-fp4-cutlass]", "      profiles: [sm120-fp4-cutlass, sm120-cudnn]", 1)
	text = strings.Replace(text, "profiles:\n", "profiles:\n  sm120-cudnn:\n    match: {compute_capability: \"12.0\", quantization: modelopt_fp4}\n    args: [--fp4-gemm-backend, flashinfer_cudnn]\n", 1)
	cudnnGemm := filepath.Join(t.TempDir(), "cudnn.yaml")
	if err := os.WriteFile(cudnnGemm, []byte(text), 0o644); err != nil {
		t.Fatal(err)
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
		{cudnnGemm, nil, "cudnn-fp4-gemm-nan"},
		{dsl, nil, "cutlass-dsl-4.5.0-sm12x"},
	} {
		err := checkRecipe(t, tc.path, tc.sets...)
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "["+tc.row+"]") || !strings.Contains(err.Error(), "fix: ") {
			t.Errorf("%s %v: %v, want a usage error naming %s", filepath.Base(tc.path), tc.sets, err, tc.row)
		}
	}
}
