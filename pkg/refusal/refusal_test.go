package refusal

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// TestCollect: every reason of a joined refusal comes back, a refusal's own with their
// codes and facts, another exit-4 error as one Host reason, and nothing for other errors;
// the error text is what stderr showed before (one problem a line).
func TestCollect(t *testing.T) {
	gpu := &Error{Reasons: []Reason{
		New(GPUCount, map[string]any{"have": 1, "need": 4}, "host has 1 GPU; this recipe needs at least 4"),
		New(Driver, map[string]any{"have": "570", "need": ">=580"}, "driver 570 does not satisfy >=580"),
	}}
	if got := gpu.Error(); got != "host does not meet the recipe's requirements:\n  host has 1 GPU; this recipe needs at least 4\n  driver 570 does not satisfy >=580" {
		t.Errorf("Error() = %q", got)
	}
	claim := fmt.Errorf("step svc: %w", &Error{Head: "shared GPUs", Reasons: []Reason{New(GPUClaim, map[string]any{"recipe": "a"}, "recipe a serves on GPU-1")}, Tail: "; remove it"})
	disk := fmt.Errorf("step weights: %w: needs 9 GB, 1 GB free", exitcode.ErrHost)
	err := errors.Join(gpu, claim, disk, errors.New("a usage problem"))
	if exitcode.Of(err) != exitcode.ExitHost {
		t.Fatalf("exit %d", exitcode.Of(err))
	}
	rs := Collect(err)
	var codes []string
	for _, r := range rs {
		codes = append(codes, r.Code)
	}
	if strings.Join(codes, ",") != "gpu_count,driver,gpu_claim,host" {
		t.Fatalf("codes %v (%+v)", codes, rs)
	}
	if rs[0].Fields["need"] != 4 || rs[3].Message != "step weights: needs 9 GB, 1 GB free" {
		t.Errorf("reasons %+v", rs)
	}
	if Collect(errors.New("not a refusal")) != nil || Collect(nil) != nil {
		t.Error("reasons for an error that is no refusal")
	}
}
