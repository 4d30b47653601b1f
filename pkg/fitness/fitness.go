// Package fitness checks that a GPU host is fit to serve before the model loads: PCIe
// links at their width, no uncorrectable ECC errors or pending remaps, no MIG unless
// asked, no other process on the GPUs the service will use, clocks not held down by the
// hardware, no Xid that means a GPU needs a reset, and peer-to-peer between the GPUs where
// the recipe asks for it. It only reads facts (pkg/gpu) and the /proc entries of the
// processes it names: it never resets a GPU or changes a setting.
//
// Every problem is reported at once, each with its fix, as the rest of the preflight does;
// a policy of the recipe's requires.gpu makes a check refuse, warn or be ignored.
package fitness

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Problem is one way the host falls short.
type Problem struct {
	// Check is the requires.gpu field that governs it ("ecc", "busy", ...).
	Check string `json:"check"`
	// GPU is the device's index, -1 for the host as a whole.
	GPU int `json:"gpu"`
	// Message says what is wrong, naming the GPU and the figures.
	Message string `json:"message"`
	// Fix says what to do about it.
	Fix string `json:"fix"`
}

// String is the problem as the preflight lists it: the message, then the fix.
func (p Problem) String() string {
	if p.Fix == "" {
		return p.Message
	}
	return p.Message + "\n    fix: " + p.Fix
}

// Result is what Check found: the problems that refuse the host and those that only warn,
// and the checks that had no facts to go on.
type Result struct {
	Refusals  []Problem `json:"refusals,omitempty"`
	Warnings  []Problem `json:"warnings,omitempty"`
	Unchecked []string  `json:"unchecked,omitempty"`
}

// Processes tells what a process is: its command line and its systemd unit. ProcFS reads
// them from /proc.
type Processes interface {
	// Describe returns the process's command line ("" when it cannot be read) and the
	// systemd unit its cgroup names ("" when none, or unknown).
	Describe(pid uint32) (cmdline, unit string)
}

// Options are what Check needs beyond the facts and the policies.
type Options struct {
	// Unit is the recipe's own systemd unit: its processes are not "another server".
	Unit string
	// Replaced are the units of the recipes this one replaces (recipe `replaces:`): their
	// servers hold the GPUs until the switch stops them, so they are not "another server"
	// either.
	Replaced []string
	// GPUs are the indices the service uses; nil means every GPU of the facts.
	GPUs []int
	// Procs describes the processes found on the GPUs; nil reads /proc.
	Procs Processes
}

// Check returns every fitness problem of the GPUs the service will use, sorted into
// refusals and warnings by the recipe's policies.
func Check(f *gpu.Facts, req recipe.GPURequirements, opts Options) Result {
	var res Result
	if f == nil || len(f.GPUs) == 0 {
		return res
	}
	if opts.Procs == nil {
		opts.Procs = ProcFS{}
	}
	add := func(p Problem) {
		switch req.Policy(p.Check) {
		case recipe.PolicyRefuse:
			res.Refusals = append(res.Refusals, p)
		case recipe.PolicyWarn:
			res.Warnings = append(res.Warnings, p)
		}
	}
	used := usedGPUs(f, opts.GPUs)
	noHealth := 0
	for _, d := range used {
		h := d.Health
		if h == nil {
			noHealth++
			continue
		}
		for _, p := range checkDevice(d, h, opts) {
			add(p)
		}
	}
	if noHealth == len(used) {
		res.Unchecked = append(res.Unchecked, fmt.Sprintf("GPU health (link, ECC, MIG, processes, clocks): the facts (%s) do not have it", orUnknown(f.Source)))
	} else if noHealth > 0 {
		res.Unchecked = append(res.Unchecked, fmt.Sprintf("GPU health of %d of %d GPUs: not reported", noHealth, len(used)))
	}
	for _, p := range checkXid(f, used) {
		add(p)
	}
	if f.Kernel == nil {
		res.Unchecked = append(res.Unchecked, "Xid events, IOMMU and PCIe ACS: the facts do not have them")
	}
	if len(used) > 1 {
		if f.Topology == nil {
			res.Unchecked = append(res.Unchecked, "peer-to-peer between the GPUs: the facts have no topology")
		} else if blocked := P2PBlocked(f, indices(used)); blocked != "" && req.Policy("p2p") != recipe.PolicyIgnore {
			add(Problem{Check: "p2p", GPU: -1, Message: blocked,
				Fix: "disable PCIe ACS on the switches between the GPUs (BIOS: ACS or PCIe ACS Control off) and set the IOMMU to passthrough " +
					"(iommu=pt on the kernel command line), then reboot; or set requires.gpu.p2p: ignore to serve with NCCL_P2P_DISABLE=1"})
		}
	}
	return res
}

// usedGPUs returns the devices the service uses: those of idx, or all.
func usedGPUs(f *gpu.Facts, idx []int) []gpu.Device {
	if idx == nil {
		return f.GPUs
	}
	var out []gpu.Device
	for _, d := range f.GPUs {
		if slices.Contains(idx, d.Index) {
			out = append(out, d)
		}
	}
	return out
}

func indices(ds []gpu.Device) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.Index
	}
	return out
}

// checkDevice checks one GPU's health facts.
func checkDevice(d gpu.Device, h *gpu.Health, opts Options) []Problem {
	var out []Problem
	add := func(check, msg, fix string) {
		out = append(out, Problem{Check: check, GPU: d.Index, Message: d.Label() + " " + msg, Fix: fix})
	}
	idle := h.ClocksEventReasons != nil && *h.ClocksEventReasons&0x1 != 0
	if l := h.PCIe; l != nil {
		if l.MaxWidth > 0 && l.CurrentWidth < l.MaxWidth {
			add("pcie_link", fmt.Sprintf("has its PCIe link at x%d; the GPU and its slot can do x%d", l.CurrentWidth, l.MaxWidth),
				"reseat the GPU (and its riser or cable) and check the slot's lane setting in the BIOS; nvidia-smi -q -d PCIE shows the link")
		}
		// An idle GPU lowers its link generation to save power: only a busy one counts.
		if l.MaxGen > 0 && l.CurrentGen < l.MaxGen && !idle {
			add("pcie_link", fmt.Sprintf("has its PCIe link at Gen%d while busy; the GPU and its slot can do Gen%d", l.CurrentGen, l.MaxGen),
				"check the slot's PCIe generation in the BIOS and the riser; nvidia-smi -q -d PCIE shows the link")
		}
	}
	reset := fmt.Sprintf("drain the node, then reset the GPU (nvidia-smi -r -i %d) or reboot; if it happens again, have the GPU serviced", d.Index)
	if e := h.ECC; e != nil && e.VolatileUncorrected > 0 {
		add("ecc", fmt.Sprintf("has %d uncorrectable ECC errors since the driver loaded", e.VolatileUncorrected), reset)
	}
	if r := h.RemappedRows; r != nil {
		if r.Failure {
			add("ecc", "failed to remap a memory row", "the GPU needs service: drain the node and have it replaced")
		} else if r.Pending {
			add("ecc", "has memory rows waiting to be remapped (the bad rows are in use until a reset)", reset)
		}
	}
	if h.RetiredPagesPending != nil && *h.RetiredPagesPending {
		add("ecc", "has memory pages waiting to be retired (in use until a reset)", reset)
	}
	if (h.MIG != nil && *h.MIG) || (h.MIGPending != nil && *h.MIGPending) {
		state := "on"
		if h.MIG == nil || !*h.MIG {
			state = "set to turn on at the next reset"
		}
		add("mig", "has MIG "+state+"; the service needs the whole GPU",
			fmt.Sprintf("nvidia-smi -i %d -mig 0 and reset the GPU, or set requires.gpu.mig: allow", d.Index))
	}
	if h.ComputeMode == "prohibited" {
		add("busy", "is in compute mode Prohibited: no process may use it",
			fmt.Sprintf("nvidia-smi -i %d -c DEFAULT", d.Index))
	}
	if h.Processes != nil {
		for _, p := range *h.Processes {
			cmd, unit := opts.Procs.Describe(p.PID)
			if unit != "" && (unit == opts.Unit || slices.Contains(opts.Replaced, unit)) {
				continue
			}
			who := fmt.Sprintf("pid %d", p.PID)
			if cmd != "" {
				who += " (" + cmd + ")"
			} else {
				who += " (not visible from here: another container or PID namespace?)"
			}
			if unit != "" {
				who += ", unit " + unit
			}
			fix := fmt.Sprintf("stop it (kill %d) or wait for it to end", p.PID)
			if unit != "" {
				fix = fmt.Sprintf("stop and disable it (systemctl disable --now %s), or name its recipe in this recipe's replaces", unit)
			}
			add("busy", fmt.Sprintf("is in use by %s, holding %.1f GiB", who, float64(p.UsedMemoryByte)/(1<<30)), fix)
		}
	}
	if h.ClocksEventReasons != nil {
		const hw = gpu.ClocksHWSlowdown | gpu.ClocksSWThermal | gpu.ClocksHWThermal | gpu.ClocksHWPowerBrake
		if m := *h.ClocksEventReasons & hw; m != 0 {
			add("clocks", "has its clocks held down: "+strings.Join(gpu.ClockReasonNames(m), ", "),
				"check the cooling, the fans and the power supply; nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER shows why")
		}
	}
	return out
}

// resetXids are Xid codes after which NVIDIA's Xid catalogue says the GPU needs a reset (or
// service) before it can be trusted again: double-bit ECC (48), row-remap failure (64),
// NVLink error (74), fallen off the bus (79), high single-bit ECC rate (92), contained and
// uncontained ECC errors (94, 95), GSP errors (119, 120) and unrecovered ECC (140).
var resetXids = map[int]bool{48: true, 64: true, 74: true, 79: true, 92: true, 94: true, 95: true, 119: true, 120: true, 140: true}

// checkXid turns the kernel log's Xid lines of the GPUs in use whose code is in resetXids
// into one problem per GPU and code, with the count and the last line. Other codes (13,
// 31, 43: an application's fault) say nothing of the host and are left out.
func checkXid(f *gpu.Facts, used []gpu.Device) []Problem {
	if f.Kernel == nil {
		return nil
	}
	byPCI := map[string]gpu.Device{}
	for _, d := range used {
		byPCI[driverPCI(d)] = d
	}
	type key struct {
		gpu  gpu.Device
		code int
	}
	count := map[key]int{}
	last := map[key]string{}
	var order []key
	for _, x := range f.Kernel.Xid {
		d, ok := byPCI[strings.ToLower(x.PCI)]
		if !ok || !resetXids[x.Code] {
			continue
		}
		k := key{d, x.Code}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
		last[k] = x.Text
	}
	var out []Problem
	for _, k := range order {
		d := k.gpu
		out = append(out, Problem{Check: "xid", GPU: d.Index,
			Message: fmt.Sprintf("%s logged Xid %d %d time(s) since boot: %s", d.Label(), k.code, count[k], last[k]),
			Fix:     fmt.Sprintf("drain the node, then reset the GPU (nvidia-smi -r -i %d) or reboot; Xid %d again after that means the GPU needs service", d.Index, k.code)})
	}
	return out
}

// driverPCI is a GPU's address as the driver prints it in Xid lines: "0000:18:00", no
// function.
func driverPCI(d gpu.Device) string {
	pci := gpu.SysfsPCI(d.PCIBusID)
	if i := strings.LastIndex(pci, "."); i > 0 {
		pci = pci[:i]
	}
	return pci
}

// P2PBlocked says why peer-to-peer between the GPUs idx cannot be used ("" when it can,
// or when the facts do not say): a pair whose NVML P2P status is not OK, a PCIe bridge
// above them whose ACS redirects peer traffic, or an IOMMU that translates their DMA.
func P2PBlocked(f *gpu.Facts, idx []int) string {
	if f == nil || len(idx) < 2 {
		return ""
	}
	var reasons []string
	for i := 0; i < len(idx); i++ {
		for j := i + 1; j < len(idx); j++ {
			l, ok := f.LinkBetween(idx[i], idx[j])
			if ok && !l.P2POK() {
				reasons = append(reasons, fmt.Sprintf("GPU %d <-> GPU %d (%s): P2P read %s, write %s", l.A, l.B, l.Level, l.P2PRead, l.P2PWrite))
			}
		}
	}
	if k := f.Kernel; k != nil {
		for _, b := range k.ACS {
			for _, g := range b.GPUs {
				if slices.Contains(idx, g) {
					reasons = append(reasons, fmt.Sprintf("PCIe bridge %s above GPU %v redirects peer traffic (ACS %s)", b.Bridge, b.GPUs, b.Control))
					break
				}
			}
		}
		// NVLink peers do not go through the IOMMU; PCIe peers do.
		if k.IOMMU == "translated" && pcieOnly(f, idx) {
			reasons = append(reasons, "the IOMMU translates the GPUs' DMA (not passthrough)")
		}
	}
	if len(reasons) == 0 {
		return ""
	}
	return "peer-to-peer between the GPUs is blocked: " + strings.Join(reasons, "; ")
}

// pcieOnly reports whether some pair of idx is connected over PCIe (not NVLink).
func pcieOnly(f *gpu.Facts, idx []int) bool {
	for i := 0; i < len(idx); i++ {
		for j := i + 1; j < len(idx); j++ {
			if l, ok := f.LinkBetween(idx[i], idx[j]); !ok || !strings.HasPrefix(l.Level, "NV") {
				return true
			}
		}
	}
	return false
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown source"
	}
	return s
}
