package steps_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/knownbad"
	"github.com/sglprov/sglprov/pkg/steps/build"
	"github.com/sglprov/sglprov/pkg/steps/command"
)

// TestReleaseRecipesHoldTorch: the release recipes write a constraints file pinning the
// torch their torch step installs, and every later pip install (SGLang's requirements, the
// kernel wheel) is held to it, so that `pip install -e python` cannot replace torch.
func TestReleaseRecipesHoldTorch(t *testing.T) {
	for _, file := range []string{"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml", "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml"} {
		t.Run(file, func(t *testing.T) {
			r := loadShipped(t, file)
			data := templateData(t, r, rtxFacts(t))
			constraints := data.Lookup("vars.constraints")
			if constraints == "" {
				t.Fatal("no constraints var")
			}
			st := r.Step("pip-constraints")
			if st == nil {
				t.Fatal("no pip-constraints step")
			}
			var spec command.Spec
			if err := st.Render(data, &spec); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(spec.Argv, "torch=="+r.Vars["torch_version"]) || !slices.Contains(spec.Argv, constraints) {
				t.Errorf("pip-constraints writes %v", spec.Argv)
			}
			for name, argv := range pipInstalls(t, r) {
				if name == "torch" {
					continue
				}
				if i := slices.Index(argv, "-c"); i < 0 || argv[i+1] != constraints {
					t.Errorf("step %s installs without -c %s: %v", name, constraints, argv)
				}
			}
			for _, name := range []string{"sglang-python"} {
				if !slices.Contains(r.Step(name).Needs, "pip-constraints") {
					t.Errorf("step %s does not need pip-constraints", name)
				}
			}
		})
	}
}

// TestNoProfileOutrunsItsFlashInfer: a profile that turns on FlashInfer's all-reduce
// fusion needs flashinfer#3903 (first in FlashInfer 0.6.17): a shipped recipe offers one
// only with a FlashInfer pin of 0.6.17 or later.
func TestNoProfileOutrunsItsFlashInfer(t *testing.T) {
	for _, file := range []string{"qwen3.5-397b-a17b-nvfp4-sm120.yaml", "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml", "qwen3-235b-a22b-fp8-sm90.yaml"} {
		r := loadShipped(t, file)
		for name, p := range r.Profiles {
			if !slices.Contains(p.Args, "--enable-flashinfer-allreduce-fusion") {
				continue
			}
			pin, err := knownbad.ParseVersion(r.Vars["flashinfer_version"])
			min, _ := knownbad.ParseVersion("0.6.17")
			if err != nil || pin.Compare(min) < 0 {
				t.Errorf("%s: profile %s needs FlashInfer 0.6.17 (flashinfer#3903); the recipe pins %q", file, name, r.Vars["flashinfer_version"])
			}
		}
	}
}

// TestSM120RecipesCheckAllReduceBeforeTheServer: every shipped SM120 recipe runs the
// all-reduce deep check over the service's GPUs with the service's interpreter before the
// service step (a host has hung on the first all-reduce with topo -p2p saying OK,
// local-inference-lab/rtx6kpro#15), bounded in time.
func TestSM120RecipesCheckAllReduceBeforeTheServer(t *testing.T) {
	for _, file := range []string{"qwen3.5-397b-a17b-nvfp4-sm120.yaml", "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml"} {
		t.Run(file, func(t *testing.T) {
			r := loadShipped(t, file)
			var ar, svc string
			for _, st := range r.Steps {
				switch st.Kind {
				case "allreduce":
					ar = st.Name
				case "systemd":
					svc = st.Name
				}
			}
			if ar == "" || svc == "" {
				t.Fatalf("allreduce step %q, service step %q", ar, svc)
			}
			if !slices.Contains(r.Step(svc).Needs, ar) {
				t.Errorf("service %s does not need %s", svc, ar)
			}
			var spec struct {
				Python  string `yaml:"python"`
				Timeout string `yaml:"timeout"`
			}
			if err := r.Step(ar).Render(templateData(t, r, rtxFacts(t)), &spec); err != nil {
				t.Fatal(err)
			}
			if spec.Python != templateData(t, r, rtxFacts(t)).Lookup("vars.python") || spec.Timeout == "" {
				t.Errorf("allreduce python %q timeout %q", spec.Python, spec.Timeout)
			}
		})
	}
}

// TestRelease0521KernelChoice: the v0.5.21 recipe installs the prebuilt cu130
// sglang-kernel wheel by default, and builds it from the release's sources for the host's
// architecture when sglang_kernel names the source; either way the installed libraries'
// architectures are checked (arch_libs).
func TestRelease0521KernelChoice(t *testing.T) {
	r := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml")
	render := func() build.Spec {
		var spec build.Spec
		if err := r.Step("sglang-kernel").Render(templateData(t, r, rtxFacts(t)), &spec); err != nil {
			t.Fatal(err)
		}
		return spec
	}
	spec := render()
	if !slices.Contains(spec.Argv, r.Vars["sglang_kernel_index"]) || !slices.Contains(spec.Argv, "sglang-kernel=="+strings.TrimPrefix(r.Vars["sglang_kernel"], "sglang-kernel==")) ||
		!strings.Contains(r.Vars["sglang_kernel_index"], "cu130") {
		t.Errorf("prebuilt: %v", spec.Argv)
	}
	if spec.Env["TORCH_CUDA_ARCH_LIST"] != "12.0a" || len(spec.ArchLibs) == 0 {
		t.Errorf("arch list %q, arch_libs %v", spec.Env["TORCH_CUDA_ARCH_LIST"], spec.ArchLibs)
	}
	r.Vars["sglang_kernel"] = "sglang-kernel @ git+https://github.com/sgl-project/sglang@v0.5.21#subdirectory=python/sglang/kernels/aot"
	spec = render()
	if !slices.Contains(spec.Argv, r.Vars["sglang_kernel"]) || !slices.Contains(spec.Argv, "--no-build-isolation") {
		t.Errorf("source: %v", spec.Argv)
	}
}

// TestSM120RecipesCheckKernelArchs: the step that installs the kernel package in each
// shipped SM120 recipe checks the installed libraries' architectures (arch_libs) in the
// service's environment.
func TestSM120RecipesCheckKernelArchs(t *testing.T) {
	for file, step := range map[string]string{"qwen3.5-397b-a17b-nvfp4-sm120.yaml": "sgl-kernel-install",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml": "sglang-kernel-install",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml": "sglang-kernel"} {
		r := loadShipped(t, file)
		var spec build.Spec
		if err := r.Step(step).Render(templateData(t, r, rtxFacts(t)), &spec); err != nil {
			t.Fatal(err)
		}
		venv := strings.TrimSuffix(templateData(t, r, rtxFacts(t)).Lookup("vars.python"), "/bin/python")
		if len(spec.ArchLibs) != 1 || !strings.HasPrefix(spec.ArchLibs[0], venv+"/lib/") || !strings.HasSuffix(spec.ArchLibs[0], "/sgl_kernel/**/common_ops*.so") {
			t.Errorf("%s: step %s arch_libs %v", file, step, spec.ArchLibs)
		}
	}
}

// TestRelease0521Pins: the v0.5.21 recipe installs what v0.5.21's pyproject declares
// (sglang-kernel 0.4.7 built against torch 2.13.0, FlashInfer 0.6.18; docs/sglang-commit.md
// names the sources), names the tag's commit for the source build, holds FlashInfer with the
// constraints, installs FlashInfer's JIT cache at the installed FlashInfer's version before
// the service starts, and spells the decode CUDA-graph limit as the release does.
func TestRelease0521Pins(t *testing.T) {
	r := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml")
	for k, want := range map[string]string{
		"sglang_version": "0.5.21", "sglang_commit": "e00930c5489053f26d86b179cee0d087f846acbb",
		"sglang_kernel": "sglang-kernel==0.4.7", "torch_version": "2.13.0", "flashinfer_version": "0.6.18",
	} {
		if r.Vars[k] != want {
			t.Errorf("var %s = %q, want %q", k, r.Vars[k], want)
		}
	}
	data := templateData(t, r, rtxFacts(t))
	var pins command.Spec
	if err := r.Step("pip-constraints").Render(data, &pins); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"flashinfer-python==0.6.18", "flashinfer-jit-cache==0.6.18", "torch==2.13.0"} {
		if !slices.Contains(pins.Argv, want) {
			t.Errorf("constraints lack %s: %v", want, pins.Argv)
		}
	}
	jc := r.Step("flashinfer-jit-cache")
	if jc == nil || !slices.Contains(jc.Needs, "sglang-python") || !slices.Contains(r.Step("sglang-service").Needs, "flashinfer-jit-cache") {
		t.Fatal("no flashinfer-jit-cache step between the sglang install and the service")
	}
	var spec command.Spec
	if err := jc.Render(data, &spec); err != nil {
		t.Fatal(err)
	}
	code := strings.Join(spec.Argv, " ")
	for _, want := range []string{"m.version('flashinfer-python')", "https://flashinfer.ai/whl/cu130", data.Lookup("vars.constraints"), "--no-deps"} {
		if !strings.Contains(code, want) {
			t.Errorf("jit cache step lacks %q: %v", want, spec.Argv)
		}
	}
	var svc struct {
		Args     []string `yaml:"args"`
		Profiles []string `yaml:"profiles"`
	}
	if err := r.Step("sglang-service").Render(data, &svc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(svc.Args, "--cuda-graph-max-bs-decode") || slices.Contains(svc.Args, "--cuda-graph-max-bs") {
		t.Errorf("service args: %v", svc.Args)
	}
	// The fusion profile, now that FlashInfer has it, first in the gate's order with the
	// plain profiles after it; its check refuses hosts without peer access.
	if len(svc.Profiles) != 3 || svc.Profiles[0] != "sm120-fp4-cutlass-ar-fusion" {
		t.Errorf("profiles %v", svc.Profiles)
	}
	p := r.Profiles["sm120-fp4-cutlass-ar-fusion"]
	if !slices.Contains(p.Args, "--enable-flashinfer-allreduce-fusion") || len(p.Match.Check) != 3 ||
		!strings.Contains(p.Match.Check[2], "can_device_access_peer") || !strings.Contains(p.Match.Check[2], "(0, 6, 17)") {
		t.Errorf("fusion profile: %+v", p)
	}
}

// TestRelease0521FusionCheckRuns: the fusion profile's check, run by the host's Python
// against a stand-in torch (device count and peer access as given) and a FlashInfer
// dist-info of a given version, passes only with FlashInfer 0.6.17 or later and peer access
// between every pair, and says which is missing.
func TestRelease0521FusionCheckRuns(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	check := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml").Profiles["sm120-fp4-cutlass-ar-fusion"].Match.Check
	for _, tc := range []struct {
		version, peer, want string
		ok                  bool
	}{
		{"0.6.18", "True", "", true},
		{"0.6.17+cu130", "True", "", true},
		{"0.6.16", "True", "older than 0.6.17", false},
		{"0.6.18", "i == 0", "no peer access between GPUs [(1, 0)]", false},
	} {
		dir := t.TempDir()
		torch := "class cuda:\n    @staticmethod\n    def device_count(): return 2\n    @staticmethod\n    def can_device_access_peer(i, j): return " + tc.peer + "\n"
		meta := filepath.Join(dir, "flashinfer_python-"+tc.version+".dist-info")
		if err := os.MkdirAll(filepath.Join(dir, "torch"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(meta, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "torch", "__init__.py"), []byte(torch), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(meta, "METADATA"), []byte("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: "+tc.version+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(py, check[1:]...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		out, err := cmd.CombinedOutput()
		if (err == nil) != tc.ok || !strings.Contains(string(out), tc.want) {
			t.Errorf("FlashInfer %s, peer %s: %v %s", tc.version, tc.peer, err, out)
		}
	}
}

// TestReleaseRecipesInstallFlashInferJITCache: the SM120 recipes install FlashInfer's
// JIT cache from FlashInfer's CUDA 13 index at the installed FlashInfer's own version, after
// SGLang's install and before the service, so that the first start does not compile
// FlashInfer's SM120 kernels inside the gate's ready_timeout.
func TestReleaseRecipesInstallFlashInferJITCache(t *testing.T) {
	for file, after := range map[string]string{"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml": "sglang-python",
		"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml": "sglang-python", "qwen3.5-397b-a17b-nvfp4-sm120.yaml": "flashinfer"} {
		r := loadShipped(t, file)
		st := r.Step("flashinfer-jit-cache")
		if st == nil || !slices.Contains(st.Needs, after) || !slices.Contains(r.Step("sglang-service").Needs, "flashinfer-jit-cache") {
			t.Errorf("%s: no flashinfer-jit-cache step between the SGLang install and the service", file)
			continue
		}
		var spec command.Spec
		if err := st.Render(templateData(t, r, rtxFacts(t)), &spec); err != nil {
			t.Fatal(err)
		}
		code := strings.Join(spec.Argv, " ")
		for _, want := range []string{"'flashinfer-jit-cache==' + m.version('flashinfer-python')", "https://flashinfer.ai/whl/cu130", "--no-deps"} {
			if !strings.Contains(code, want) {
				t.Errorf("%s: jit cache step lacks %q: %v", file, want, spec.Argv)
			}
		}
	}
}
