package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/knownbad"
)

// TestValidateRefusesKnownBad: the shipped SM120 recipe with each known-bad combination
// set into its pins or launch line is refused at validate (exit 2), naming the row and its
// fix; as shipped it validates. A recipe pinning nvidia-cutlass-dsl 4.5.0 for SM120 is
// refused the same way.
func TestValidateRefusesKnownBad(t *testing.T) {
	sm120 := filepath.Join(repoRoot(t), "recipes", "qwen3.5-397b-a17b-nvfp4-sm120.yaml")
	if code, _, stderr := run(t, nil, "validate", "-f", sm120); code != 0 {
		t.Fatalf("as shipped: exit %d: %s", code, stderr)
	}
	dsl := writeRecipe(t, t.TempDir(), `apiVersion: sglprov/v1
name: dsl
requires:
  gpu: {compute_capability: "12.0"}
steps:
  - name: dsl
    command:
      argv: [/opt/v/bin/python, -m, pip, install, "nvidia-cutlass-dsl==4.5.0"]
`)
	for _, tc := range []struct {
		args []string
		row  string
	}{
		{[]string{"-f", sm120, "--set", "cudnn_version=9.21.0.48"}, "cudnn-fp4-gemm-nan"},
		{[]string{"-f", sm120, "--set", "flashinfer_version=0.6.18rc5"}, "flashinfer-0.6.18rc-sm12x-moe"},
		{[]string{"-f", sm120, "--set", "kv_cache_dtype=fp4_e2m1"}, "fp4-kv-cache-sm12x"},
		{[]string{"-f", dsl}, "cutlass-dsl-4.5.0-sm12x"},
	} {
		code, _, stderr := run(t, nil, append([]string{"validate"}, tc.args...)...)
		if code != exitcode.ExitUsage || !strings.Contains(stderr, "["+tc.row+"]") || !strings.Contains(stderr, "fix: ") {
			t.Errorf("%v: exit %d, want %d naming %s: %s", tc.args, code, exitcode.ExitUsage, tc.row, stderr)
		}
	}
}

// TestKnownBadCommand: `sglprov known-bad` prints every row with its source; --json too.
func TestKnownBadCommand(t *testing.T) {
	code, stdout, stderr := run(t, nil, "known-bad")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, r := range knownbad.Table() {
		for _, want := range []string{r.ID, r.Sources[0], r.Fix} {
			if !strings.Contains(stdout, want) {
				t.Errorf("table lacks %q", want)
			}
		}
	}
	code, stdout, _ = run(t, nil, "known-bad", "--json")
	if code != 0 || !strings.Contains(stdout, `"version": "`+knownbad.TableVersion+`"`) {
		t.Errorf("--json: exit %d: %s", code, stdout)
	}
}
