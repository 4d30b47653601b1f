package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/knownbad"
)

// TestValidateRefusesKnownBad: validate checks the recipe's pins against the known-bad
// table (the rows themselves: knownbad's TestCheckRecipe): the shipped v0.5.21 recipe
// validates, and with a FlashInfer older than flashinfer#3192 set into its pins beside its
// cuDNN FP4 GEMM profile it is refused (exit 2), naming the row and its fix.
func TestValidateRefusesKnownBad(t *testing.T) {
	sm120 := filepath.Join(repoRoot(t), "recipes", "qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml")
	if code, _, stderr := run(t, nil, "validate", "-f", sm120); code != 0 {
		t.Fatalf("as shipped: exit %d: %s", code, stderr)
	}
	code, _, stderr := run(t, nil, "validate", "-f", sm120, "--set", "flashinfer_version=0.6.8")
	if code != exitcode.ExitUsage || !strings.Contains(stderr, "[cudnn-fp4-gemm-nan]") || !strings.Contains(stderr, "fix: ") {
		t.Errorf("exit %d, want %d naming cudnn-fp4-gemm-nan: %s", code, exitcode.ExitUsage, stderr)
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
