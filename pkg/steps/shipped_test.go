package steps_test

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
	"github.com/sglprov/sglprov/pkg/steps/command"
)

// loadShipped loads a shipped recipe with the registry's step kinds.
func loadShipped(t *testing.T, file string) *recipe.Recipe {
	t.Helper()
	r, err := recipe.Load(filepath.Join("..", "..", "recipes", file), steps.Specs(steps.Registry()), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rtxFacts returns the GPU facts of the 8 x RTX PRO 6000 fixture, the SM120 recipes' host.
func rtxFacts(t *testing.T) *gpu.Facts {
	t.Helper()
	facts, err := gpu.LoadFixture(filepath.Join("..", "..", "testdata", "gpu", "rtx-pro-6000-x8.json"))
	if err != nil {
		t.Fatal(err)
	}
	return facts
}

// templateData returns r's template data for facts.
func templateData(t *testing.T, r *recipe.Recipe, facts *gpu.Facts) recipe.Data {
	t.Helper()
	data, err := r.NewData(facts.TemplateData())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// pipInstalls returns the rendered argv of every command step that runs "pip install"
// (GPU templates rendered with the RTX PRO 6000 fixture's facts).
func pipInstalls(t *testing.T, r *recipe.Recipe) map[string][]string {
	t.Helper()
	facts := rtxFacts(t)
	data := templateData(t, r, facts)
	out := map[string][]string{}
	for _, st := range r.Steps {
		if st.Kind != "command" {
			continue
		}
		var spec command.Spec
		if err := st.Render(data, &spec); err != nil {
			t.Fatalf("step %s: %v", st.Name, err)
		}
		if i := slices.Index(spec.Argv, "pip"); i >= 0 && i+1 < len(spec.Argv) && spec.Argv[i+1] == "install" {
			out[st.Name] = spec.Argv
		}
	}
	return out
}

// TestShippedRecipesKeepTorchPinsOutOfSGLangInstall: the pip install that resolves
// SGLang's requirements (which pin torch) must not also ask for a package that torch
// pins exactly: torch 2.9.1+cu130 requires nvidia-cudnn-cu13==9.13.0.50, so a
// "nvidia-cudnn-cu13>=9.15" beside it makes pip give up, or backtrack to PyPI's CUDA 12.8
// torch. Such an upgrade belongs in its own step, with --no-deps.
func TestShippedRecipesKeepTorchPinsOutOfSGLangInstall(t *testing.T) {
	for _, file := range []string{"qwen3.5-397b-a17b-nvfp4-sm120.yaml", "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml", "qwen3-235b-a22b-fp8-sm90.yaml"} {
		t.Run(file, func(t *testing.T) {
			installsSGLang := false
			for name, argv := range pipInstalls(t, loadShipped(t, file)) {
				if i := slices.Index(argv, "-e"); i < 0 || i+1 >= len(argv) || !strings.HasSuffix(argv[i+1], "/python") {
					continue
				}
				installsSGLang = true
				for _, a := range argv {
					if strings.HasPrefix(a, "nvidia-cudnn-cu") {
						t.Errorf("step %s installs SGLang's requirements together with %q, which torch pins", name, a)
					}
				}
			}
			if !installsSGLang {
				t.Error("no step installs SGLang's python package")
			}
		})
	}
}

// TestSM120RecipeUpgradesCuDNN: the SM120 recipe serves a multimodal architecture with
// torch 2.9.1, whose start refuses a cuDNN below 9.15 (SGLang's
// check_torch_2_9_1_cudnn_compatibility), and its first profile uses flashinfer_cudnn.
// A step installs nvidia-cudnn-cu13 at least 9.15 with --no-deps, after SGLang's
// requirements (so it runs again whenever they do) and the kernel build, and before the
// server.
func TestSM120RecipeUpgradesCuDNN(t *testing.T) {
	r := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	var step string
	for name, argv := range pipInstalls(t, r) {
		for _, a := range argv {
			v, ok := strings.CutPrefix(a, "nvidia-cudnn-cu13==")
			if !ok {
				continue
			}
			step = name
			if !slices.Contains(argv, "--no-deps") {
				t.Errorf("step %s installs %s without --no-deps", name, a)
			}
			parts := strings.SplitN(v, ".", 3)
			major, _ := strconv.Atoi(parts[0])
			minor := 0
			if len(parts) > 1 {
				minor, _ = strconv.Atoi(parts[1])
			}
			if major != 9 || minor < 15 {
				t.Errorf("step %s installs cuDNN %s; SGLang's check needs 9.15 or later (and torch needs 9.x)", name, v)
			}
		}
	}
	if step == "" {
		t.Fatal("no step installs nvidia-cudnn-cu13==9.x with x >= 15")
	}
	needs := r.Step(step).Needs
	if !slices.Contains(needs, "sglang-python") {
		t.Errorf("step %s needs %v; it must follow sglang-python, which puts torch's pin back", step, needs)
	}
	// Not at the same time as the kernel build (which imports torch, and so libcudnn) or
	// another pip in the venv; and not before it, or a new cuDNN would rebuild sgl-kernel.
	if !slices.Contains(needs, "sgl-kernel-install") {
		t.Errorf("step %s needs %v; it must follow sgl-kernel-install", step, needs)
	}
	for _, st := range r.Steps {
		if slices.Contains(st.Needs, step) && (st.Kind == "build" || st.Kind == "command") {
			t.Errorf("step %s (%s) needs %s: a cuDNN bump would run it again", st.Name, st.Kind, step)
		}
	}
	if svc := r.Step("sglang-service"); svc == nil || !slices.Contains(svc.Needs, step) {
		t.Errorf("sglang-service does not need %s", step)
	}
}

// TestShippedServicesUseTheBuildToolkit: the server compiles kernels at run time
// (FlashInfer's FP4 GEMM and MoE modules on SM120, DeepGEMM on Hopper) with the nvcc that
// CUDA_HOME names, and systemd's PATH has none, so the unit sets CUDA_HOME to the toolkit
// sgl-kernel was built with (and torch is built for).
func TestShippedServicesUseTheBuildToolkit(t *testing.T) {
	for file, fixture := range map[string]string{
		"qwen3.5-397b-a17b-nvfp4-sm120.yaml":               "rtx-pro-6000-x8.json",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml": "rtx-pro-6000-x8.json",
		"qwen3-235b-a22b-fp8-sm90.yaml":                    "h100-x8.json",
	} {
		t.Run(file, func(t *testing.T) {
			r := loadShipped(t, file)
			facts, err := gpu.LoadFixture(filepath.Join("..", "..", "testdata", "gpu", fixture))
			if err != nil {
				t.Fatal(err)
			}
			data, err := r.NewData(facts.TemplateData())
			if err != nil {
				t.Fatal(err)
			}
			envOf := func(step string) map[string]string {
				var body struct {
					Env map[string]string `yaml:"env"`
				}
				st := r.Step(step)
				if st == nil {
					t.Fatalf("no step %s", step)
				}
				if err := st.Render(data, &body); err != nil {
					t.Fatalf("step %s: %v", step, err)
				}
				return body.Env
			}
			kernel := "sgl-kernel"
			if r.Step(kernel) == nil {
				kernel = "sglang-kernel" // the package's name from sgl-project/sglang#20440 on
			}
			built := envOf(kernel)["CUDA_HOME"]
			if built == "" {
				t.Fatal("sgl-kernel is built without CUDA_HOME")
			}
			if got := envOf("sglang-service")["CUDA_HOME"]; got != built {
				t.Errorf("the service runs with CUDA_HOME=%q; sgl-kernel was built with %q", got, built)
			}
		})
	}
}

// TestShippedRecipesLetNCCLChoose: no shipped recipe forces an NCCL peer-to-peer level or
// switch; the service step derives NCCL_P2P_DISABLE from the host's facts.
func TestShippedRecipesLetNCCLChoose(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "recipes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped recipes: %v", err)
	}
	for _, f := range files {
		r := loadShipped(t, filepath.Base(f))
		for name, p := range r.Profiles {
			for k := range p.Env {
				if strings.HasPrefix(k, "NCCL_P2P") {
					t.Errorf("%s: profile %s sets %s", filepath.Base(f), name, k)
				}
			}
		}
		for _, st := range r.Steps {
			if st.Kind != "systemd" {
				continue
			}
			var body struct {
				Env map[string]string `yaml:"env"`
			}
			data, err := r.NewData(map[string]any{"gpu": map[string]any{"count": 8}})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Render(data, &body); err != nil {
				t.Fatalf("%s: step %s: %v", filepath.Base(f), st.Name, err)
			}
			for k := range body.Env {
				if strings.HasPrefix(k, "NCCL_P2P") {
					t.Errorf("%s: step %s sets %s", filepath.Base(f), st.Name, k)
				}
			}
		}
	}
}

// TestShippedRecipesInstallHostPackages: every shipped recipe that builds SGLang from source
// installs the host packages the build needs (git for the source, the venv module, the
// headers and toolchain for sgl-kernel) before its source step. The demo recipes, which run
// on a laptop with a fake server, are left out.
func TestShippedRecipesInstallHostPackages(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "recipes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "demo") {
			continue
		}
		r := loadShipped(t, filepath.Base(f))
		for _, st := range r.Steps {
			if st.Kind != "source" {
				continue
			}
			ok := false
			for _, n := range st.Needs {
				if d := r.Step(n); d != nil && d.Kind == "packages" {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: source step %s needs no packages step (git, python3-venv, build-essential, libnuma-dev)", filepath.Base(f), st.Name)
			}
		}
	}
}
