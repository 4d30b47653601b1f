package gpu

import (
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
)

func TestSubset(t *testing.T) {
	f := &Facts{GPUs: []Device{
		{Index: 0, UUID: "GPU-aaaa", ComputeCapability: "12.0", MemoryTotalBytes: 100 << 30},
		{Index: 1, UUID: "GPU-bbbb", ComputeCapability: "12.0", MemoryTotalBytes: 100 << 30},
		{Index: 2, UUID: "GPU-cccc", ComputeCapability: "12.0", MemoryTotalBytes: 100 << 30},
	}}
	s, err := f.Subset([]string{"GPU-cccc", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Count() != 2 || s.GPUs[0].Index != 0 || s.GPUs[1].Index != 2 || !s.Selected {
		t.Fatalf("subset = %+v", s)
	}
	if v, byIndex := s.CUDAVisibleDevices(); v != "GPU-aaaa,GPU-cccc" || byIndex {
		t.Errorf("CUDA_VISIBLE_DEVICES = %q (by index %v)", v, byIndex)
	}
	if f.Count() != 3 {
		t.Errorf("Subset changed the host's facts")
	}
	if v, _ := f.CUDAVisibleDevices(); v != "" {
		t.Errorf("the whole host sets CUDA_VISIBLE_DEVICES=%q", v)
	}
	for _, bad := range [][]string{{"7"}, {"GPU-zzzz"}, {"1", "GPU-bbbb"}} {
		if _, err := f.Subset(bad); err == nil || !strings.Contains(err.Error(), "requires.gpu.devices") {
			t.Errorf("Subset(%v) = %v, want a refusal", bad, err)
		}
	}
	// The requirements are checked against the subset: two GPUs are not min_count 3.
	r := recipe.Requirements{GPU: recipe.GPURequirements{MinCount: 3, Devices: []string{"0", "1"}}}
	s, _ = f.Subset(r.GPU.Devices)
	if p := Check(r, s); len(p) == 0 {
		t.Errorf("min_count 3 on a subset of 2 passed")
	}
}
