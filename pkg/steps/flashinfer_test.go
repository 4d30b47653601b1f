package steps_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
)

// firstFlashInferWithSM120Fixes is the first FlashInfer release whose tag contains both
// flashinfer#2780 (GDC flags for the CUTLASS FP4 GEMM, commit 8e1642a4ca29, in v0.6.7 on)
// and #2913 (the same for the CUTLASS fused MoE, commit b12d3449de76, in v0.6.8 on; the
// v0.6.7.post* releases do not carry it).
var firstFlashInferWithSM120Fixes = []int{0, 6, 8}

// argvs returns the rendered argv of every command and build step, by step name.
func argvs(t *testing.T, r *recipe.Recipe, data recipe.Data) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, st := range r.Steps {
		if st.Kind != "command" && st.Kind != "build" {
			continue
		}
		var body struct {
			Argv []string `yaml:"argv"`
		}
		if err := st.Render(data, &body); err != nil {
			t.Fatalf("step %s: %v", st.Name, err)
		}
		out[st.Name] = body.Argv
	}
	return out
}

// after reports whether step needs dep, directly or through other steps.
func after(r *recipe.Recipe, step, dep string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(name string) bool {
		st := r.Step(name)
		if st == nil || seen[name] {
			return false
		}
		seen[name] = true
		for _, n := range st.Needs {
			if n == dep || walk(n) {
				return true
			}
		}
		return false
	}
	return walk(step)
}

// versionAtLeast compares a dotted release version with min.
func versionAtLeast(v string, min []int) bool {
	parts := strings.Split(v, ".")
	for i, m := range min {
		n := 0
		if i < len(parts) {
			n, _ = strconv.Atoi(parts[i])
		}
		if n != m {
			return n > m
		}
	}
	return true
}

// TestSM120RecipePinsFlashInfer: the SM120 recipe installs flashinfer-python and
// flashinfer-cubin at one version that has both SM120 race fixes, writes a constraints file
// holding them (with flashinfer-jit-cache and torch) at those versions, and every pip step
// after the FlashInfer install is held to that file; the server waits for it, and the gate
// keeps its 64-request load case.
func TestSM120RecipePinsFlashInfer(t *testing.T) {
	r := loadShipped(t, "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	facts := rtxFacts(t)
	data := templateData(t, r, facts)
	vars := data["vars"].(map[string]string)
	fi, constraints, torch := vars["flashinfer_version"], vars["constraints"], vars["torch_version"]
	if fi == "" || constraints == "" {
		t.Fatalf("vars flashinfer_version %q and constraints %q must be set", fi, constraints)
	}
	if !versionAtLeast(fi, firstFlashInferWithSM120Fixes) {
		t.Errorf("flashinfer_version %s predates flashinfer#2913 (first in 0.6.8)", fi)
	}
	all := argvs(t, r, data)

	var writer, installer string
	for name, argv := range all {
		if slices.Contains(argv, constraints) && slices.Contains(argv, "flashinfer-python=="+fi) && !slices.Contains(argv, "pip") {
			writer = name
			for _, want := range []string{"flashinfer-cubin==" + fi, "flashinfer-jit-cache==" + fi, "torch==" + torch} {
				if !slices.Contains(argv, want) {
					t.Errorf("constraints step %s lacks %s: %q", name, want, argv)
				}
			}
		}
		if i := slices.Index(argv, "pip"); i >= 0 && i+1 < len(argv) && argv[i+1] == "install" &&
			slices.Contains(argv, "flashinfer-python=="+fi) {
			installer = name
			if !slices.Contains(argv, "flashinfer-cubin=="+fi) {
				t.Errorf("step %s installs flashinfer-python %s without flashinfer-cubin at the same version: %q", name, fi, argv)
			}
		}
	}
	if writer == "" || installer == "" {
		t.Fatalf("constraints step %q, FlashInfer install step %q: both must exist", writer, installer)
	}
	if !after(r, installer, writer) || !after(r, installer, "sglang-python") {
		t.Errorf("step %s must follow %s and sglang-python (which puts SGLang's own FlashInfer pin back)", installer, writer)
	}
	for name, argv := range all {
		i := slices.Index(argv, "pip")
		if i < 0 || i+1 >= len(argv) || argv[i+1] != "install" {
			continue
		}
		if name != installer && !after(r, name, installer) {
			continue
		}
		c := slices.Index(argv, "-c")
		if c < 0 || c+1 >= len(argv) || argv[c+1] != constraints {
			t.Errorf("pip step %s runs after %s without -c %s: %q", name, installer, constraints, argv)
		}
	}
	if !after(r, "sglang-service", installer) {
		t.Errorf("sglang-service does not wait for %s", installer)
	}

	var smoke struct {
		Cases []struct {
			Name        string `yaml:"name"`
			Concurrency int    `yaml:"concurrency"`
		} `yaml:"cases"`
	}
	if err := r.Step("smoke").Render(data, &smoke); err != nil {
		t.Fatal(err)
	}
	load := false
	for _, c := range smoke.Cases {
		load = load || c.Concurrency >= 64
	}
	if !load {
		t.Error("the smoke gate has no case with 64 concurrent requests, the guard against FlashInfer's SM120 races")
	}
}
