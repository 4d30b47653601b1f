package recipe

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglprov/sglprov/pkg/versions"
)

// This file holds the recipe's requires section: plain data, its validation and its
// reading from the recipe's YAML; the packages that act on it (gpu, fitness, hostcmd)
// take these types.

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

	// The host-fitness policies (checked by pkg/fitness): each is "refuse", "warn" or "ignore" ("allow"
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

// Policies a requires.gpu fitness field takes.
const (
	PolicyRefuse = "refuse"
	PolicyWarn   = "warn"
	PolicyIgnore = "ignore"
	// PolicyAllow is the MIG policy that lets MIG be on.
	PolicyAllow = "allow"
)

// FitnessDefaults are the policies of a recipe that says nothing: a degraded link or
// slowed clocks warn; errors that make answers wrong, MIG, another server on the GPUs and
// Xids that mean a reset refuse; P2P is not required (the service's NCCL settings follow
// it).
var FitnessDefaults = map[string]string{
	"pcie_link": PolicyWarn,
	"ecc":       PolicyRefuse,
	"mig":       PolicyRefuse,
	"busy":      PolicyRefuse,
	"clocks":    PolicyWarn,
	"xid":       PolicyRefuse,
	"p2p":       PolicyIgnore,
}

// FitnessPolicies lists the policies each fitness check accepts.
var FitnessPolicies = map[string][]string{
	"pcie_link": {PolicyRefuse, PolicyWarn, PolicyIgnore},
	"ecc":       {PolicyRefuse, PolicyWarn, PolicyIgnore},
	"mig":       {PolicyRefuse, PolicyWarn, PolicyAllow},
	"busy":      {PolicyRefuse, PolicyWarn, PolicyIgnore},
	"clocks":    {PolicyRefuse, PolicyWarn, PolicyIgnore},
	"xid":       {PolicyRefuse, PolicyWarn, PolicyIgnore},
	"p2p":       {PolicyRefuse, PolicyWarn, PolicyIgnore},
}

// FitnessChecks returns the names of the fitness checks (the requires.gpu fields), sorted.
func FitnessChecks() []string {
	checks := make([]string, 0, len(FitnessPolicies))
	for c := range FitnessPolicies {
		checks = append(checks, c)
	}
	sort.Strings(checks)
	return checks
}

// Policy returns the recipe's policy for the fitness check, or its default.
func (g GPURequirements) Policy(check string) string {
	var v string
	switch check {
	case "pcie_link":
		v = g.PCIeLink
	case "ecc":
		v = g.ECC
	case "mig":
		v = g.MIG
	case "busy":
		v = g.Busy
	case "clocks":
		v = g.Clocks
	case "xid":
		v = g.Xid
	case "p2p":
		v = g.P2P
	}
	if v == "" {
		return FitnessDefaults[check]
	}
	return v
}

// ValidatePolicy checks the recipe's policy for one fitness check: `requires.gpu.ecc:
// "off" is not one of refuse, warn, ignore`.
func (g GPURequirements) ValidatePolicy(check string) error {
	if v := g.Policy(check); !slices.Contains(FitnessPolicies[check], v) {
		return fmt.Errorf("requires.gpu.%s: %q is not one of %s", check, v, strings.Join(FitnessPolicies[check], ", "))
	}
	return nil
}

// ValidatePolicies checks every fitness policy of the recipe, naming the field of the
// first bad one.
func (g GPURequirements) ValidatePolicies() error {
	for _, c := range FitnessChecks() {
		if err := g.ValidatePolicy(c); err != nil {
			return err
		}
	}
	return nil
}

// CommandRequirement is what a recipe asks of one command: `nvcc: {version: ">=12.8"}`,
// `git: {}`.
type CommandRequirement struct {
	// Version is a version range in the recipe's syntax (">=12.8", ">=3.10,<3.13"); empty
	// asks for presence only.
	Version string `yaml:"version" json:"version,omitempty"`
}

// CommandRequirements maps command names to what the recipe asks of them
// (requires.commands).
type CommandRequirements map[string]CommandRequirement

// Names returns the command names, sorted.
func (r CommandRequirements) Names() []string {
	out := make([]string, 0, len(r))
	for k := range r {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var commandNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]*$`)

// ValidCommandName reports whether name is a bare command name (no path, no spaces).
func ValidCommandName(name string) bool { return commandNameRE.MatchString(name) }

// VersionedCommands are the commands whose version sglprov reads (pkg/hostcmd keeps a
// parser for each, and a test holds the two lists equal): only these may carry a version
// range in requires.commands.
var VersionedCommands = []string{"c++", "cc", "cmake", "g++", "gcc", "git", "nvcc", "python", "python3"}

// checkRanges checks the version ranges of requires, read from the nodes themselves, so
// that a bad range is reported in the same pass as a misspelt field next to it (which
// keeps req from being decoded).
func (p *parser) checkRanges(n *yaml.Node, req *Requirements) {
	check := func(field string, at *yaml.Node) {
		if at == nil || at.Kind != yaml.ScalarNode || at.Value == "" || at.Tag == "!!null" {
			return
		}
		if _, err := versions.ParseRange(at.Value); err != nil {
			p.addf(at, field, "%v", err)
		}
	}
	check("requires.gpu.compute_capability", nodeAt(nodeAt(n, "gpu"), "compute_capability"))
	check("requires.driver", nodeAt(n, "driver"))
	check("requires.cuda", nodeAt(n, "cuda"))
	counts := Requirements{GPU: GPURequirements{MinCount: req.GPU.MinCount, Counts: req.GPU.Counts,
		CountsReason: req.GPU.CountsReason}}
	if err := counts.Validate(); err != nil {
		at := nodeAt(nodeAt(n, "gpu"), "counts")
		if at == nil {
			at = nodeAt(n, "gpu")
		}
		field, msg, _ := strings.Cut(err.Error(), ": ")
		p.addf(at, field, "%s", msg)
	}
	for _, c := range FitnessChecks() {
		if err := req.GPU.ValidatePolicy(c); err != nil {
			at := nodeAt(nodeAt(n, "gpu"), c)
			if at == nil {
				at = nodeAt(n, "gpu")
			}
			field, msg, _ := strings.Cut(err.Error(), ": ")
			p.addf(at, field, "%s", msg)
		}
	}
}

// splitCommands returns the requires mapping without its commands entry, and that entry's
// value (nil when there is none).
func splitCommands(n *yaml.Node) (rest, commands *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return n, nil
	}
	c := *n
	c.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "commands" {
			commands = n.Content[i+1]
			continue
		}
		c.Content = append(c.Content, n.Content[i], n.Content[i+1])
	}
	return &c, commands
}

// parseCommands reads requires.commands: command names mapped to {version: RANGE} or {}.
func (p *parser) parseCommands(n *yaml.Node) CommandRequirements {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.addf(n, "requires.commands", "requires.commands must be a mapping of command names to {version: RANGE}, not %s", kindName(n))
		return nil
	}
	out := CommandRequirements{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "requires.commands." + k.Value
		if !ValidCommandName(k.Value) {
			p.addf(k, path, "%q is not a command name (a name on the PATH, without a folder)", k.Value)
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.addf(k, path, "duplicate command %q", k.Value)
			continue
		}
		var req CommandRequirement
		if !p.decodeStrict(v, path, &req) {
			continue
		}
		if req.Version != "" {
			if _, err := versions.ParseRange(req.Version); err != nil {
				p.addf(nodeAt(v, "version"), path+".version", "%v", err)
			} else if !slices.Contains(VersionedCommands, k.Value) {
				p.addf(nodeAt(v, "version"), path+".version", "sglprov cannot read the version of %s (it reads %s): drop the version range, or check it in a command step",
					k.Value, strings.Join(VersionedCommands, ", "))
			}
		}
		out[k.Value] = req
	}
	return out
}
