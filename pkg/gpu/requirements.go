package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/versions"
)

// Requirements is what a recipe needs of the host (the recipe's `requires:`).
type Requirements struct {
	// GPU is what every GPU of the host must have, and how many there must be.
	GPU GPURequirements `yaml:"gpu" json:"gpu"`
	// Driver is a version range for the NVIDIA driver, e.g. ">=575".
	Driver string `yaml:"driver" json:"driver"`
	// CUDA is a version range for the CUDA version the driver supports, e.g. ">=12.8".
	CUDA string `yaml:"cuda" json:"cuda"`
}

// GPURequirements is what every GPU of the host must have, and how many there must be.
type GPURequirements struct {
	// ComputeCapability is a version range every GPU must match: "12.0", ">=9.0,<10.0".
	ComputeCapability string `yaml:"compute_capability" json:"compute_capability"`
	// MinCount is the least number of GPUs. A recipe with any GPU requirement needs at
	// least one.
	MinCount int `yaml:"min_count" json:"min_count"`
	// MinMemoryGiB is the least total memory of each GPU, in GiB.
	MinMemoryGiB float64 `yaml:"min_memory_gib" json:"min_memory_gib"`
	// MinTotalMemoryGiB is the least memory of all GPUs together, in GiB: what a model
	// split over tensor-parallel ranks needs for its weights and KV cache.
	MinTotalMemoryGiB float64 `yaml:"min_total_memory_gib" json:"min_total_memory_gib,omitempty"`
	// Counts, when set, are the only numbers of GPUs the recipe runs on, e.g. [4, 8] for a
	// model whose attention heads only those tensor-parallel sizes divide; a host with
	// another number is refused.
	Counts []int `yaml:"counts" json:"counts,omitempty"`
	// CountsReason says why only Counts work; the refusal quotes it.
	CountsReason string `yaml:"counts_reason" json:"counts_reason,omitempty"`
	// Devices, when set, restricts the recipe to these GPUs (NVML indices such as "4" or
	// UUIDs such as "GPU-..."): the facts, the counts above and the server's
	// CUDA_VISIBLE_DEVICES are those of these GPUs only.
	Devices []string `yaml:"devices" json:"devices,omitempty"`

	// The host-fitness policies (pkg/fitness): each is "refuse", "warn" or "ignore" ("allow"
	// for MIG), and "" takes the default given.

	// PCIeLink is for a GPU whose PCIe link trained below its width, or below its
	// generation while busy (default warn).
	PCIeLink string `yaml:"pcie_link" json:"pcie_link,omitempty"`
	// ECC is for uncorrectable ECC errors since the driver loaded, rows or pages waiting to
	// be remapped or retired, and failed remaps (default refuse).
	ECC string `yaml:"ecc" json:"ecc,omitempty"`
	// MIG is for a GPU with MIG on or pending (default refuse; "allow" lets it be).
	MIG string `yaml:"mig" json:"mig,omitempty"`
	// Busy is for a compute process on a GPU the service uses that is not the recipe's own
	// unit's (default refuse).
	Busy string `yaml:"busy" json:"busy,omitempty"`
	// Clocks is for clocks held down by a hardware or thermal slowdown (default warn).
	Clocks string `yaml:"clocks" json:"clocks,omitempty"`
	// Xid is for an Xid since boot after which the GPU needs a reset (default refuse).
	Xid string `yaml:"xid" json:"xid,omitempty"`
	// P2P is for GPUs of the service between which peer-to-peer is blocked (default ignore:
	// the service's NCCL settings then turn P2P off).
	P2P string `yaml:"p2p" json:"p2p,omitempty"`
}

// IsZero reports whether r requires nothing.
func (r Requirements) IsZero() bool {
	g := r.GPU
	return g.ComputeCapability == "" && g.MinCount == 0 && g.MinMemoryGiB == 0 && g.MinTotalMemoryGiB == 0 && len(g.Counts) == 0 &&
		g.CountsReason == "" && len(g.Devices) == 0 && r.Driver == "" && r.CUDA == "" && !g.HasFitnessPolicy()
}

// HasFitnessPolicy reports whether any host-fitness policy is set.
func (g GPURequirements) HasFitnessPolicy() bool {
	return g.PCIeLink != "" || g.ECC != "" || g.MIG != "" || g.Busy != "" || g.Clocks != "" || g.Xid != "" || g.P2P != ""
}

// Validate checks the ranges and numbers of r, naming the field of the first bad one:
// `requires.driver: invalid version range ...`. The error of a bad range wraps its
// *RangeError.
func (r Requirements) Validate() error {
	for _, f := range []struct{ name, value string }{
		{"requires.gpu.compute_capability", r.GPU.ComputeCapability},
		{"requires.driver", r.Driver},
		{"requires.cuda", r.CUDA},
	} {
		if f.value == "" {
			continue
		}
		if _, err := versions.ParseRange(f.value); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if r.GPU.MinCount < 0 {
		return fmt.Errorf("requires.gpu.min_count: %d is negative", r.GPU.MinCount)
	}
	if r.GPU.MinMemoryGiB < 0 {
		return fmt.Errorf("requires.gpu.min_memory_gib: %g is negative", r.GPU.MinMemoryGiB)
	}
	if r.GPU.MinTotalMemoryGiB < 0 {
		return fmt.Errorf("requires.gpu.min_total_memory_gib: %g is negative", r.GPU.MinTotalMemoryGiB)
	}
	for _, n := range r.GPU.Counts {
		if n < 1 {
			return fmt.Errorf("requires.gpu.counts: %d is not a number of GPUs", n)
		}
		if n < r.GPU.MinCount {
			return fmt.Errorf("requires.gpu.counts: %d is below min_count %d", n, r.GPU.MinCount)
		}
	}
	if r.GPU.CountsReason != "" && len(r.GPU.Counts) == 0 {
		return fmt.Errorf("requires.gpu.counts_reason: set without counts")
	}
	return nil
}

// minCount is the effective least number of GPUs: a recipe that says anything about GPUs
// needs at least one.
func (g GPURequirements) minCount() int {
	if g.MinCount == 0 && (g.ComputeCapability != "" || g.MinMemoryGiB > 0 || g.MinTotalMemoryGiB > 0 || len(g.Counts) > 0) {
		return 1
	}
	return g.MinCount
}

// countRefusal says why a host with n GPUs is refused by Counts ("" when it is not):
// `host has 6 GPUs; this recipe runs on 4 or 8 GPUs only (REASON)`.
func (g GPURequirements) countRefusal(n int) string {
	if len(g.Counts) == 0 || n < g.minCount() {
		return ""
	}
	names := make([]string, len(g.Counts))
	for i, c := range g.Counts {
		if c == n {
			return ""
		}
		names[i] = strconv.Itoa(c)
	}
	list := names[0]
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
	msg := fmt.Sprintf("host has %s; this recipe runs on %s GPUs only", plural(n, "GPU"), list)
	if g.CountsReason != "" {
		msg += " (" + g.CountsReason + ")"
	}
	return msg
}

// Check returns every way the host falls short of r, one message each, nil when it meets
// them all. Every GPU must match; a message names the GPU, what it has and what the recipe
// needs: `GPU 0 (NVIDIA H200) has compute capability 9.0; this recipe needs 12.0`,
// `host has 1 GPU; this recipe needs at least 8`, `driver 550.54.15 does not satisfy >=575`.
func (r Requirements) Check(f *Facts) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if need := r.GPU.minCount(); f.Count() < need {
		add("host has %s; this recipe needs at least %d", plural(f.Count(), "GPU"), need)
	}
	if msg := r.GPU.countRefusal(f.Count()); msg != "" {
		add("%s", msg)
	}
	if cc := strings.TrimSpace(r.GPU.ComputeCapability); cc != "" {
		rng, err := versions.ParseRange(cc)
		if err != nil {
			add("requires.gpu.compute_capability: %v", err)
		} else {
			for _, d := range f.gpus() {
				if !rng.Match(d.ComputeCapability) {
					add("%s has compute capability %s; this recipe needs %s", d.Label(), orUnknown(d.ComputeCapability), cc)
				}
			}
		}
	}
	if need := r.GPU.MinMemoryGiB; need > 0 {
		for _, d := range f.gpus() {
			switch {
			case d.MemoryTotalBytes == 0:
				add("%s does not report its memory; this recipe needs %s GiB", d.Label(), formatGiB(need))
			case d.MemoryGiB() < need:
				add("%s has %s GiB of memory; this recipe needs %s", d.Label(), formatHave(d.MemoryGiB()), formatGiB(need))
			}
		}
	}
	if need := r.GPU.MinTotalMemoryGiB; need > 0 && f.Count() > 0 {
		total := 0.0
		for _, d := range f.gpus() {
			total += d.MemoryGiB()
		}
		if total < need {
			add("host has %s with %s GiB of memory in all; this recipe needs %s GiB", plural(f.Count(), "GPU"),
				formatHave(total), formatGiB(need))
		}
	}
	driver := ""
	if f != nil {
		driver = f.DriverVersion
	}
	problems = append(problems, checkVersion("driver", driver, r.Driver)...)
	problems = append(problems, checkVersion("CUDA", f.CUDAVersion(), r.CUDA)...)
	return problems
}

// checkVersion checks one version against a range: `driver 550.54.15 does not satisfy >=575`.
func checkVersion(what, have, want string) []string {
	want = strings.TrimSpace(want)
	if want == "" {
		return nil
	}
	rng, err := versions.ParseRange(want)
	if err != nil {
		return []string{fmt.Sprintf("requires.%s: %v", strings.ToLower(what), err)}
	}
	if have == "" {
		return []string{fmt.Sprintf("%s version is unknown; this recipe needs %s", what, want)}
	}
	if !rng.Match(have) {
		return []string{fmt.Sprintf("%s %s does not satisfy %s", what, have, want)}
	}
	return nil
}

// MatchCC reports whether compute capability cc ("12.0") matches expr, a version range
// ("12.0", ">=9.0,<10.0"); profiles use it. A bad expr is a *RangeError.
func MatchCC(expr, cc string) (bool, error) {
	rng, err := versions.ParseRange(expr)
	if err != nil {
		return false, err
	}
	return rng.Match(cc), nil
}

func (f *Facts) gpus() []Device {
	if f == nil {
		return nil
	}
	return f.GPUs
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// formatGiB prints a required amount as written: 90, 79.5.
func formatGiB(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// formatHave prints a measured amount rounded down to one decimal, so that 79.99 GiB is
// never shown as the 80 it falls short of.
func formatHave(v float64) string {
	return strconv.FormatFloat(float64(int64(v*10))/10, 'f', 1, 64)
}
