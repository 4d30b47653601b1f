package steps_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/steps/build"
)

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// TestSM120RecipeForCurrentSGLang: the second SM120 recipe builds a late-2026 SGLang release
// at a commit, with no patch series; its kernel is the sglang-kernel package built from
// python/sglang/kernels/aot and installed under that name; both SM120 recipes pin the same
// weights commit.
func TestSM120RecipeForCurrentSGLang(t *testing.T) {
	early := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	r := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml")
	facts := rtxFacts(t)
	data := templateData(t, r, facts)
	vars := data["vars"].(map[string]string)
	earlyData := templateData(t, early, facts)
	earlyVars := earlyData["vars"].(map[string]string)
	if !commitRE.MatchString(vars["sglang_commit"]) || vars["sglang_commit"] == earlyVars["sglang_commit"] {
		t.Errorf("sglang_commit %q: want a 40-hex commit other than the early pin", vars["sglang_commit"])
	}
	for name, v := range map[string]map[string]string{"early": earlyVars, "current": vars} {
		if !commitRE.MatchString(v["model_revision"]) {
			t.Errorf("%s recipe: model_revision %q is not a commit", name, v["model_revision"])
		}
	}
	if vars["model_revision"] != earlyVars["model_revision"] {
		t.Errorf("the two SM120 recipes serve different weights: %s and %s", vars["model_revision"], earlyVars["model_revision"])
	}
	for _, st := range r.Steps {
		if st.Kind == "patch" {
			t.Errorf("step %s patches the tree; the release needs none of the early series", st.Name)
		}
	}
	var kernel, install *build.Spec
	for _, st := range r.Steps {
		if st.Kind != "build" {
			continue
		}
		var spec build.Spec
		if err := st.Render(data, &spec); err != nil {
			t.Fatalf("step %s: %v", st.Name, err)
		}
		switch {
		case slices.Contains(spec.Argv, "wheel"):
			kernel = &spec
		case slices.Contains(spec.Argv, "install"):
			install = &spec
		}
	}
	if kernel == nil || install == nil {
		t.Fatal("want a wheel build step and an install step")
	}
	if want := vars["src"] + "/python/sglang/kernels/aot"; kernel.Dir != want || install.Dir != want {
		t.Errorf("kernel built in %q, installed from %q; want %q (sgl-project/sglang#32648)", kernel.Dir, install.Dir, want)
	}
	if !slices.Contains(install.Argv, "sglang-kernel") || slices.Contains(install.Argv, "sgl-kernel") {
		t.Errorf("install step %q: want the sglang-kernel package (sgl-project/sglang#20440)", strings.Join(install.Argv, " "))
	}
}

// TestSM120RecipeChecksTorchArchList: before the kernel build, a step asks the installed
// torch's cpp_extension to parse the same TORCH_CUDA_ARCH_LIST the build gets.
func TestSM120RecipeChecksTorchArchList(t *testing.T) {
	r := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	facts := rtxFacts(t)
	data := templateData(t, r, facts)
	var body struct {
		Argv []string          `yaml:"argv"`
		Env  map[string]string `yaml:"env"`
	}
	var check string
	for _, st := range r.Steps {
		if st.Kind != "command" {
			continue
		}
		if err := st.Render(data, &body); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.Join(body.Argv, " "), "_get_cuda_arch_flags") {
			check = st.Name
			break
		}
	}
	if check == "" {
		t.Fatal("no step checks TORCH_CUDA_ARCH_LIST against torch's cpp_extension")
	}
	var kernel build.Spec
	if err := r.Step("sgl-kernel").Render(data, &kernel); err != nil {
		t.Fatal(err)
	}
	if body.Env["TORCH_CUDA_ARCH_LIST"] != "12.0a" || body.Env["TORCH_CUDA_ARCH_LIST"] != kernel.Env["TORCH_CUDA_ARCH_LIST"] {
		t.Errorf("check step %s: TORCH_CUDA_ARCH_LIST %q, kernel build %q, want both 12.0a", check, body.Env["TORCH_CUDA_ARCH_LIST"], kernel.Env["TORCH_CUDA_ARCH_LIST"])
	}
	if !after(r, "sgl-kernel", check) || !after(r, check, "torch") {
		t.Errorf("step %s must follow torch and precede sgl-kernel", check)
	}
}
