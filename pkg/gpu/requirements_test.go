package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/versions"
)

// sm120 is the requirement of the shipped SM120 recipe.
var sm120 = recipe.Requirements{
	GPU:    recipe.GPURequirements{ComputeCapability: "12.0", MinCount: 1, MinMemoryGiB: 90},
	Driver: ">=575",
	CUDA:   ">=12.8",
}

// h200 is a requirement for one H200-class GPU.
var h200 = recipe.Requirements{
	GPU:    recipe.GPURequirements{ComputeCapability: ">=9.0,<10.0", MinCount: 1, MinMemoryGiB: 140},
	Driver: ">=570",
	CUDA:   ">=12.8",
}

// each returns format applied to GPU indexes 0..n-1.
func each(n int, format string) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestCheckFixtures(t *testing.T) {
	const (
		rtx  = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
		h100 = "NVIDIA H100 80GB HBM3"
	)
	tests := []struct {
		name    string
		fixture string
		req     recipe.Requirements
		want    []string
	}{
		{"sm120 on rtx-pro-6000-x8", "rtx-pro-6000-x8.json", sm120, nil},
		{"sm120 on rtx-pro-6000-x8 driver 590", "rtx-pro-6000-x8-driver-590.json", sm120, nil},
		{"sm120 on h200-x1", "h200-x1.json", sm120, []string{
			"GPU 0 (NVIDIA H200) has compute capability 9.0; this recipe needs 12.0",
			"driver 570.172.08 does not satisfy >=575",
		}},
		{"sm120 on h100-x8", "h100-x8.json", sm120, concat(
			each(8, "GPU %d ("+h100+") has compute capability 9.0; this recipe needs 12.0"),
			each(8, "GPU %d ("+h100+") has 79.6 GiB of memory; this recipe needs 90"),
			[]string{"driver 550.54.15 does not satisfy >=575", "CUDA 12.4 does not satisfy >=12.8"},
		)},
		{"sm120 on mixed names the odd GPU", "mixed.json", sm120, []string{
			"GPU 7 (NVIDIA RTX 6000 Ada Generation) has compute capability 8.9; this recipe needs 12.0",
			"GPU 7 (NVIDIA RTX 6000 Ada Generation) has 47.9 GiB of memory; this recipe needs 90",
		}},
		{"sm120 on none", "none.json", sm120, []string{"host has 0 GPUs; this recipe needs at least 1"}},
		{"h200 on h200-x1", "h200-x1.json", h200, nil},
		{"h200 on rtx-pro-6000-x8", "rtx-pro-6000-x8.json", h200, concat(
			each(8, "GPU %d ("+rtx+") has compute capability 12.0; this recipe needs >=9.0,<10.0"),
			each(8, "GPU %d ("+rtx+") has 95.5 GiB of memory; this recipe needs 140"),
		)},
		{"h200 on h100-x8", "h100-x8.json", h200, concat(
			each(8, "GPU %d ("+h100+") has 79.6 GiB of memory; this recipe needs 140"),
			[]string{"driver 550.54.15 does not satisfy >=570", "CUDA 12.4 does not satisfy >=12.8"},
		)},
		{"eight GPUs on h200-x1", "h200-x1.json", recipe.Requirements{GPU: recipe.GPURequirements{MinCount: 8}},
			[]string{"host has 1 GPU; this recipe needs at least 8"}},
		{"nothing required on none", "none.json", recipe.Requirements{}, nil},
		{"only a driver on none", "none.json", recipe.Requirements{Driver: ">=575"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := LoadFixture(fixture(tt.fixture))
			if err != nil && !errors.Is(err, ErrNoGPU) {
				t.Fatalf("LoadFixture: %v", err)
			}
			if diff := cmp.Diff(tt.want, Check(tt.req, f)); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckUnknownValues(t *testing.T) {
	f := &Facts{GPUs: []Device{{Index: 0, Name: "NVIDIA GB10", ComputeCapability: "12.1"}}}
	req := recipe.Requirements{
		GPU:    recipe.GPURequirements{ComputeCapability: ">=12.0", MinMemoryGiB: 90},
		Driver: ">=575",
		CUDA:   ">=12.8",
	}
	want := []string{
		"GPU 0 (NVIDIA GB10) does not report its memory; this recipe needs 90 GiB",
		"driver version is unknown; this recipe needs >=575",
		"CUDA version is unknown; this recipe needs >=12.8",
	}
	if diff := cmp.Diff(want, Check(req, f)); diff != "" {
		t.Errorf("Check (-want +got):\n%s", diff)
	}
	if got := Check(sm120, nil); len(got) != 3 || got[0] != "host has 0 GPUs; this recipe needs at least 1" {
		t.Errorf("Check(nil) = %q", got)
	}
}

func TestCheckBadRange(t *testing.T) {
	req := recipe.Requirements{GPU: recipe.GPURequirements{ComputeCapability: "sm_120"}, Driver: ">=575,,"}
	got := Check(req, loadFixture(t, "rtx-pro-6000-x8.json"))
	if len(got) != 2 || !strings.Contains(got[0], `requires.gpu.compute_capability: invalid version range "sm_120"`) ||
		!strings.Contains(got[1], `requires.driver: invalid version range ">=575,,"`) {
		t.Errorf("Check = %q, want both bad ranges named", got)
	}
}

func TestRequirementsValidate(t *testing.T) {
	tests := []struct {
		name string
		req  recipe.Requirements
		want string
	}{
		{"sm120", sm120, ""},
		{"h200", h200, ""},
		{"empty", recipe.Requirements{}, ""},
		{"bad cc", recipe.Requirements{GPU: recipe.GPURequirements{ComputeCapability: "sm_120"}}, `requires.gpu.compute_capability: invalid version range "sm_120"`},
		{"bad driver", recipe.Requirements{Driver: "=>575"}, `requires.driver: invalid version range "=>575"`},
		{"bad cuda", recipe.Requirements{CUDA: ">=12.8,"}, `requires.cuda: invalid version range ">=12.8,"`},
		{"negative count", recipe.Requirements{GPU: recipe.GPURequirements{MinCount: -1}}, "requires.gpu.min_count: -1 is negative"},
		{"negative memory", recipe.Requirements{GPU: recipe.GPURequirements{MinMemoryGiB: -2}}, "requires.gpu.min_memory_gib: -2 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want it to start with %q", err, tt.want)
			}
			var re *versions.RangeError
			if strings.Contains(tt.want, "range") && !errors.As(err, &re) {
				t.Errorf("Validate = %v, want it to wrap a *RangeError", err)
			}
		})
	}
}

func TestMatchCC(t *testing.T) {
	tests := []struct {
		expr, cc string
		want     bool
		wantErr  bool
	}{
		{"12.0", "12.0", true, false},
		{"12.0", "12.1", false, false},
		{">=12.0,<13.0", "12.1", true, false},
		{">=9.0,<10.0", "10.0", false, false},
		{"!=8.9", "8.9", false, false},
		{"sm_120", "12.0", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.expr+" "+tt.cc, func(t *testing.T) {
			got, err := MatchCC(tt.expr, tt.cc)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("MatchCC(%q, %q) = %v, %v; want %v, error %v", tt.expr, tt.cc, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// A recipe whose model only some tensor-parallel sizes divide refuses the other GPU
// counts, with the reason, and accepts its own.
func TestCheckCounts(t *testing.T) {
	req := recipe.Requirements{GPU: recipe.GPURequirements{ComputeCapability: "12.0", MinCount: 4, Counts: []int{4, 8},
		CountsReason: "--tp must divide the model's 32 attention heads"}}
	for n := 1; n <= 9; n++ {
		ccs := make([]string, n)
		for i := range ccs {
			ccs[i] = "12.0"
		}
		got := Check(req, factsWithCCs(ccs...))
		var want []string
		switch {
		case n < 4:
			want = []string{fmt.Sprintf("host has %s; this recipe needs at least 4", plural(n, "GPU"))}
		case n == 4 || n == 8:
		default:
			want = []string{fmt.Sprintf("host has %d GPUs; this recipe runs on 4 or 8 GPUs only (--tp must divide the model's 32 attention heads)", n)}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d GPUs (-want +got):\n%s", n, diff)
		}
	}
	three := recipe.Requirements{GPU: recipe.GPURequirements{Counts: []int{2, 4, 8}}}
	if got := Check(three, factsWithCCs("9.0", "9.0", "9.0")); len(got) != 1 ||
		got[0] != "host has 3 GPUs; this recipe runs on 2, 4 or 8 GPUs only" {
		t.Errorf("3 GPUs with counts [2 4 8]: %q", got)
	}
	if three.IsZero() {
		t.Error("IsZero is true for a requirement with counts only")
	}
	if !(recipe.Requirements{}).IsZero() {
		t.Error("IsZero is false for no requirement")
	}
}

func TestValidateCounts(t *testing.T) {
	for _, tt := range []struct {
		req  recipe.GPURequirements
		want string
	}{
		{recipe.GPURequirements{Counts: []int{0, 4}}, "requires.gpu.counts: 0 is not a number of GPUs"},
		{recipe.GPURequirements{MinCount: 4, Counts: []int{2, 4}}, "requires.gpu.counts: 2 is below min_count 4"},
		{recipe.GPURequirements{CountsReason: "why"}, "requires.gpu.counts_reason: set without counts"},
		{recipe.GPURequirements{MinCount: 4, Counts: []int{4, 8}, CountsReason: "why"}, ""},
	} {
		err := recipe.Requirements{GPU: tt.req}.Validate()
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("Validate(%+v) = %q, want %q", tt.req, got, tt.want)
		}
	}
}

// The weights of a tensor-parallel model need the GPUs' memory together: two H100s fall
// short of what two H200s hold.
func TestCheckMinTotalMemory(t *testing.T) {
	req := recipe.Requirements{GPU: recipe.GPURequirements{ComputeCapability: "9.0", MinCount: 2, MinTotalMemoryGiB: 260}}
	if got := Check(req, loadFixture(t, "h100-x8.json")); len(got) != 0 {
		t.Errorf("8 x H100: %q", got)
	}
	two := loadFixture(t, "h100-x8.json")
	two.GPUs = two.GPUs[:2]
	want := []string{"host has 2 GPUs with 159.2 GiB of memory in all; this recipe needs 260 GiB"}
	if diff := cmp.Diff(want, Check(req, two)); diff != "" {
		t.Errorf("2 x H100 (-want +got):\n%s", diff)
	}
	h200 := loadFixture(t, "h200-x1.json")
	h200.GPUs = append(h200.GPUs, h200.GPUs[0])
	h200.GPUs[1].Index = 1
	if got := Check(req, h200); len(got) != 0 {
		t.Errorf("2 x H200: %q", got)
	}
	if err := (recipe.Requirements{GPU: recipe.GPURequirements{MinTotalMemoryGiB: -1}}).Validate(); err == nil {
		t.Error("negative min_total_memory_gib is valid")
	}
}
