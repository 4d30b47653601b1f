package steps_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/knownbad"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
	"github.com/sglprov/sglprov/pkg/steps/command"
	"github.com/sglprov/sglprov/test/pyindex"
)

// TestJITCacheStepInstallsTheMatchingVersion: the flashinfer-jit-cache step of the v0.5.21
// recipe, run by real pip against an index holding the cache at 0.6.17, 0.6.18 and 0.6.19
// (with the +cu130 local version FlashInfer's wheels carry), installs the one of the
// FlashInfer installed in the venv, through the recipe's constraints; with a FlashInfer
// whose cache the index lacks it fails instead of installing another.
func TestJITCacheStepInstallsTheMatchingVersion(t *testing.T) {
	py := pyindex.NeedPip(t)
	ix := pyindex.Start(t)
	for _, v := range []string{"0.6.17+cu130", "0.6.18+cu130", "0.6.19+cu130"} {
		f, b := pyindex.BuildWheel(t, "flashinfer-jit-cache", v, "")
		ix.Publish("flashinfer-jit-cache", f, b)
	}
	for _, v := range []string{"0.6.18", "0.6.16"} {
		f, b := pyindex.BuildWheel(t, "flashinfer-python", v, "")
		ix.Publish("flashinfer-python", f, b)
	}
	for _, tc := range []struct {
		flashinfer, want string
	}{{"0.6.18", "0.6.18+cu130"}, {"0.6.16", ""}} {
		dir := t.TempDir()
		python, site := pyindex.Venv(t, py, filepath.Join(dir, "venv"))
		install := exec.Command(python, "-m", "pip", "install", "--index-url", ix.URL(), "flashinfer-python=="+tc.flashinfer)
		install.Env = pyindex.PipEnv()
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("installing flashinfer-python: %v: %s", err, out)
		}
		constraints := filepath.Join(dir, "constraints.txt")
		if err := os.WriteFile(constraints, []byte("flashinfer-jit-cache=="+tc.flashinfer+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := recipe.Load("../../recipes/qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml", steps.Specs(steps.Registry()),
			[]string{"python=" + python, "constraints=" + constraints, "flashinfer_jit_cache_index=" + ix.URL()})
		if err != nil {
			t.Fatal(err)
		}
		var spec command.Spec
		if err := r.Step("flashinfer-jit-cache").Render(templateData(t, r, rtxFacts(t)), &spec); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
		cmd.Env = pyindex.PipEnv()
		out, err := cmd.CombinedOutput()
		got, rerr := knownbad.Installed([]string{site}, false)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if tc.want == "" {
			if err == nil || got["flashinfer-jit-cache"] != "" {
				t.Errorf("FlashInfer %s: %v, cache %q installed: %s", tc.flashinfer, err, got["flashinfer-jit-cache"], out)
			}
			continue
		}
		if err != nil || got["flashinfer-jit-cache"] != tc.want {
			t.Errorf("FlashInfer %s: %v, cache %q, want %s: %s", tc.flashinfer, err, got["flashinfer-jit-cache"], tc.want, strings.TrimSpace(string(out)))
		}
	}
}
