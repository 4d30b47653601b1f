package gpu

import (
	"fmt"
	"io"
	"strings"
)

// Health is what a GPU's links, error counters, modes and users say of its fitness to
// serve: the facts that host fitness (pkg/fitness) checks. A nil field was not read (an
// old fixture, a GPU or driver that does not report it); Unread names the NVML calls that
// failed, so that "unknown" is never mistaken for "fine".
type Health struct {
	// PCIe is the PCIe link as trained now and at most.
	PCIe *PCIeLink `json:"pcie,omitempty"`
	// ECC is the ECC mode and the uncorrected error counts.
	ECC *ECC `json:"ecc,omitempty"`
	// RemappedRows are the memory rows remapped since the GPU was made (Ampere and later).
	RemappedRows *RemappedRows `json:"remapped_rows,omitempty"`
	// RetiredPagesPending reports pages waiting to be retired (pre-Ampere page retirement);
	// a reset or reboot retires them.
	RetiredPagesPending *bool `json:"retired_pages_pending,omitempty"`
	// ClocksEventReasons is NVML's bit mask of why the clocks are held below their maximum
	// now (nvmlDeviceGetCurrentClocksEventReasons).
	ClocksEventReasons *uint64 `json:"clocks_event_reasons,omitempty"`
	// PersistenceMode reports whether the driver stays loaded with no client.
	PersistenceMode *bool `json:"persistence_mode,omitempty"`
	// ComputeMode is "default", "exclusive_thread", "prohibited" or "exclusive_process".
	ComputeMode string `json:"compute_mode,omitempty"`
	// MIG reports whether MIG mode is on now (nil: the GPU has no MIG).
	MIG *bool `json:"mig,omitempty"`
	// MIGPending reports whether MIG mode is set to change at the next reset.
	MIGPending *bool `json:"mig_pending,omitempty"`
	// Processes are the compute processes on the GPU now; nil when they could not be read,
	// empty when there are none.
	Processes *[]Process `json:"processes,omitempty"`
	// Unread names the facts that could not be read, with NVML's reason.
	Unread []string `json:"unread,omitempty"`
}

// PCIeLink is a GPU's PCIe link: the generation and width it trained at now, and the most
// the GPU and its slot can do. A link below its maximum costs host-to-device bandwidth
// (weights load, CPU offload) and, on PCIe hosts, all-reduce bandwidth. An idle GPU may
// drop its link generation to save power, so a lower generation at idle is not a fault;
// a lower width is.
type PCIeLink struct {
	CurrentGen   int `json:"current_gen"`
	MaxGen       int `json:"max_gen"`
	CurrentWidth int `json:"current_width"`
	MaxWidth     int `json:"max_width"`
	// ReplayCounter counts PCIe link-level retransmissions since the driver loaded: a
	// growing count is a bad riser, slot or cable.
	ReplayCounter *uint64 `json:"replay_counter,omitempty"`
}

// ECC is a GPU's ECC mode and its uncorrected (double-bit) error counts.
type ECC struct {
	// Enabled is the ECC mode now; Pending the mode after the next reset.
	Enabled bool `json:"enabled"`
	Pending bool `json:"pending"`
	// VolatileUncorrected counts uncorrected errors since the driver loaded;
	// AggregateUncorrected over the GPU's life.
	VolatileUncorrected  uint64 `json:"volatile_uncorrected"`
	AggregateUncorrected uint64 `json:"aggregate_uncorrected"`
}

// RemappedRows is NVML's row-remapping state (nvmlDeviceGetRemappedRows).
type RemappedRows struct {
	Corrected   int `json:"corrected"`
	Uncorrected int `json:"uncorrected"`
	// Pending rows are remapped at the next GPU reset; until then the bad rows are in use.
	Pending bool `json:"pending"`
	// Failure reports that a remap failed: the GPU needs service.
	Failure bool `json:"failure"`
}

// Process is one compute process on a GPU.
type Process struct {
	PID            uint32 `json:"pid"`
	UsedMemoryByte uint64 `json:"used_memory_bytes"`
}

// Link is what NVML says of one pair of GPUs: how they are connected (the levels that
// `nvidia-smi topo -m` prints) and whether peer-to-peer reads and writes work.
type Link struct {
	// A and B are the GPUs' indices, A < B.
	A int `json:"a"`
	B int `json:"b"`
	// Level is the connection: "NV<n>" (n NVLinks between them), "PIX" (one PCIe switch),
	// "PXB" (several PCIe switches), "PHB" (a PCIe host bridge), "NODE" (host bridges of
	// one NUMA node), "SYS" (across the CPUs' interconnect) or "X" (the same board).
	Level string `json:"level"`
	// P2PRead and P2PWrite are NVML's P2P status: "OK" or why not
	// ("chipset_not_supported", "gpu_not_supported", "topology_not_supported",
	// "disabled_by_regkey", "not_supported", "unknown").
	P2PRead  string `json:"p2p_read"`
	P2PWrite string `json:"p2p_write"`
}

// P2POK reports whether both directions of peer-to-peer work.
func (l Link) P2POK() bool { return l.P2PRead == "OK" && l.P2PWrite == "OK" }

// KernelFacts is what the kernel says of the GPUs' surroundings: the IOMMU, PCIe Access
// Control Services on the bridges above the GPUs, and Xid events since boot.
type KernelFacts struct {
	// IOMMU is "off", "passthrough" or "translated" (DMA remapping for the GPUs), from
	// each GPU's iommu_group type in sysfs and /proc/cmdline; "unknown" when neither says.
	IOMMU string `json:"iommu"`
	// Cmdline holds the IOMMU switches of the kernel command line (intel_iommu=, amd_iommu=,
	// iommu=, iommu.passthrough=).
	Cmdline []string `json:"cmdline,omitempty"`
	// ACS lists the PCIe bridges above the GPUs whose ACS control redirects peer-to-peer
	// requests or completions to the root complex.
	ACS []ACSBridge `json:"acs,omitempty"`
	// ACSUnread says why ACS could not be read ("" when it was), e.g. the config space
	// needs root.
	ACSUnread string `json:"acs_unread,omitempty"`
	// Xid are the `NVRM: Xid` lines of the kernel log since boot.
	Xid []XidEvent `json:"xid,omitempty"`
	// XidUnread says why the kernel log could not be read ("" when it was).
	XidUnread string `json:"xid_unread,omitempty"`
}

// ACSBridge is one PCIe bridge with Access Control Services that redirect peer traffic.
type ACSBridge struct {
	// Bridge is its PCI address, e.g. "0000:16:02.0".
	Bridge string `json:"bridge"`
	// GPUs are the indices of the GPUs below it.
	GPUs []int `json:"gpus"`
	// Control names the set ACS control bits as lspci prints them ("SrcValid+ ReqRedir+
	// CmpltRedir+ ...").
	Control string `json:"control"`
}

// XidEvent is one Xid the driver logged.
type XidEvent struct {
	// PCI is the GPU's address as the driver prints it ("0000:18:00").
	PCI string `json:"pci"`
	// Code is the Xid number (79: fallen off the bus, 48: double-bit ECC, 94/95: contained
	// and uncontained ECC errors, 119/120: GSP errors).
	Code int `json:"code"`
	// Text is the log line after "NVRM: ".
	Text string `json:"text"`
}

// Clock event reasons that mean hardware holds the clocks down (as opposed to idle, an
// applications-clock setting or a software power cap).
const (
	// ClocksHWSlowdown is HW slowdown: thermal or power-brake assertion by the board.
	ClocksHWSlowdown uint64 = 0x8
	// ClocksSWThermal is the driver holding clocks down for temperature.
	ClocksSWThermal uint64 = 0x20
	// ClocksHWThermal is the hardware thermal slowdown.
	ClocksHWThermal uint64 = 0x40
	// ClocksHWPowerBrake is the external power brake (the PSU or the chassis).
	ClocksHWPowerBrake uint64 = 0x80
)

var clockReasonNames = []struct {
	bit  uint64
	name string
}{
	{0x1, "gpu_idle"}, {0x2, "applications_clocks_setting"}, {0x4, "sw_power_cap"},
	{ClocksHWSlowdown, "hw_slowdown"}, {0x10, "sync_boost"}, {ClocksSWThermal, "sw_thermal_slowdown"},
	{ClocksHWThermal, "hw_thermal_slowdown"}, {ClocksHWPowerBrake, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
}

// ClockReasonNames names the bits of a clocks event reasons mask, as nvidia-smi -q does.
func ClockReasonNames(mask uint64) []string {
	var out []string
	for _, r := range clockReasonNames {
		if mask&r.bit != 0 {
			out = append(out, r.name)
			mask &^= r.bit
		}
	}
	if mask != 0 {
		out = append(out, fmt.Sprintf("0x%x", mask))
	}
	return out
}

// topologyName turns NVML's common-ancestor level into nvidia-smi's label.
func topologyName(level int) string {
	switch level {
	case 0:
		return "X"
	case 10:
		return "PIX"
	case 20:
		return "PXB"
	case 30:
		return "PHB"
	case 40:
		return "NODE"
	case 50:
		return "SYS"
	}
	return fmt.Sprintf("level%d", level)
}

// p2pName turns NVML's P2P status into the name Link uses.
func p2pName(status int) string {
	switch status {
	case 0:
		return "OK"
	case 1:
		return "chipset_not_supported"
	case 2:
		return "gpu_not_supported"
	case 3:
		return "topology_not_supported"
	case 4:
		return "disabled_by_regkey"
	case 5:
		return "not_supported"
	}
	return "unknown"
}

// LinkBetween returns the link of GPUs a and b (either order) and whether f has it.
func (f *Facts) LinkBetween(a, b int) (Link, bool) {
	if f == nil {
		return Link{}, false
	}
	if a > b {
		a, b = b, a
	}
	for _, l := range f.Topology {
		if l.A == a && l.B == b {
			return l, true
		}
	}
	return Link{}, false
}

// FormatTopology prints the GPU pairs as `nvidia-smi topo -m` and `topo -p2p r` would:
// one line per pair, "GPU0 <-> GPU1  NV18  p2p read OK, write OK".
func FormatTopology(f *Facts) string {
	if f == nil || len(f.Topology) == 0 {
		return ""
	}
	var sb strings.Builder
	for _, l := range f.Topology {
		fmt.Fprintf(&sb, "GPU%d <-> GPU%d  %-5s p2p read %s, write %s\n", l.A, l.B, l.Level, l.P2PRead, l.P2PWrite)
	}
	return sb.String()
}

// FormatHealth writes the fitness facts: one line per GPU that has them, the pairs'
// topology and P2P, then the kernel's IOMMU, ACS and Xid facts. It writes nothing for facts
// without them (an old fixture, nvidia-smi).
func FormatHealth(w io.Writer, f *Facts) error {
	var sb strings.Builder
	for _, d := range f.gpus() {
		if d.Health != nil {
			fmt.Fprintf(&sb, "GPU %d: %s\n", d.Index, strings.Join(healthParts(d.Health), ", "))
		}
	}
	if t := FormatTopology(f); t != "" {
		sb.WriteString("\n" + t)
	}
	if k := f.kernel(); k != nil {
		writeKernel(&sb, k)
	}
	if sb.Len() == 0 {
		return nil
	}
	if _, err := io.WriteString(w, "\n"+sb.String()); err != nil {
		return fmt.Errorf("writing GPU health: %w", err)
	}
	return nil
}

// healthParts says each fact of h that was read, in the order of healthFormats.
func healthParts(h *Health) []string {
	var parts []string
	for _, format := range healthFormats {
		parts = append(parts, format(h)...)
	}
	return parts
}

// healthFormats say one fact of a GPU's health each, in the order of its line: nothing
// for a fact not read.
var healthFormats = []func(h *Health) []string{
	formatPCIe,
	formatECC,
	formatRemappedRows,
	func(h *Health) []string {
		if h.RetiredPagesPending != nil && *h.RetiredPagesPending {
			return []string{"retired pages pending"}
		}
		return nil
	},
	func(h *Health) []string { return onOffPart("MIG ", h.MIG) },
	func(h *Health) []string { return onOffPart("persistence ", h.PersistenceMode) },
	func(h *Health) []string {
		if h.ComputeMode != "" {
			return []string{"compute mode " + h.ComputeMode}
		}
		return nil
	},
	formatClocks,
	formatProcesses,
	func(h *Health) []string {
		if len(h.Unread) > 0 {
			return []string{"unread: " + strings.Join(h.Unread, "; ")}
		}
		return nil
	},
}

// formatPCIe says the PCIe link as trained and at most, with its replays.
func formatPCIe(h *Health) []string {
	l := h.PCIe
	if l == nil {
		return nil
	}
	s := fmt.Sprintf("PCIe Gen%d x%d (max Gen%d x%d)", l.CurrentGen, l.CurrentWidth, l.MaxGen, l.MaxWidth)
	if l.ReplayCounter != nil {
		s += fmt.Sprintf(", %d replays", *l.ReplayCounter)
	}
	return []string{s}
}

// formatECC says whether ECC is on and, when it is, its uncorrected errors.
func formatECC(h *Health) []string {
	e := h.ECC
	switch {
	case e == nil:
		return nil
	case e.Enabled:
		return []string{fmt.Sprintf("ECC on (%d uncorrected since load, %d ever)", e.VolatileUncorrected, e.AggregateUncorrected)}
	}
	return []string{"ECC off"}
}

// formatRemappedRows says the rows remapped and whether a remap is pending or failed.
func formatRemappedRows(h *Health) []string {
	r := h.RemappedRows
	if r == nil {
		return nil
	}
	return []string{fmt.Sprintf("remapped rows %d corrected, %d uncorrected, pending %s, failure %s",
		r.Corrected, r.Uncorrected, yesNo(r.Pending), yesNo(r.Failure))}
}

// formatClocks names the reasons the clocks are held down ("none").
func formatClocks(h *Health) []string {
	if h.ClocksEventReasons == nil {
		return nil
	}
	reasons := ClockReasonNames(*h.ClocksEventReasons)
	if len(reasons) == 0 {
		reasons = []string{"none"}
	}
	return []string{"clocks: " + strings.Join(reasons, ",")}
}

// formatProcesses says each compute process and the memory it holds ("no process").
func formatProcesses(h *Health) []string {
	if h.Processes == nil {
		return nil
	}
	if len(*h.Processes) == 0 {
		return []string{"no process"}
	}
	parts := make([]string, 0, len(*h.Processes))
	for _, p := range *h.Processes {
		parts = append(parts, fmt.Sprintf("pid %d holds %.1f GiB", p.PID, float64(p.UsedMemoryByte)/gib))
	}
	return parts
}

// onOffPart says label on or off (nothing when b was not read).
func onOffPart(label string, b *bool) []string {
	if b == nil {
		return nil
	}
	return []string{label + onOff(*b)}
}

// writeKernel writes the kernel's IOMMU mode, the ACS bridges that redirect peer traffic
// and the Xid errors, with what of them could not be read.
func writeKernel(sb *strings.Builder, k *KernelFacts) {
	fmt.Fprintf(sb, "\nIOMMU:  %s", k.IOMMU)
	if len(k.Cmdline) > 0 {
		fmt.Fprintf(sb, " (%s)", strings.Join(k.Cmdline, " "))
	}
	sb.WriteString("\n")
	for _, b := range k.ACS {
		fmt.Fprintf(sb, "ACS:    bridge %s above GPU %v redirects peer traffic: %s\n", b.Bridge, b.GPUs, b.Control)
	}
	if k.ACSUnread != "" {
		fmt.Fprintf(sb, "ACS:    unread: %s\n", k.ACSUnread)
	}
	for _, x := range k.Xid {
		fmt.Fprintf(sb, "Xid:    %s\n", x.Text)
	}
	if k.XidUnread != "" {
		fmt.Fprintf(sb, "Xid:    unread: %s\n", k.XidUnread)
	}
}

// kernel returns the kernel's facts (nil for nil facts).
func (f *Facts) kernel() *KernelFacts {
	if f == nil {
		return nil
	}
	return f.Kernel
}

// yesNo says b as yes or no.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// onOff says b as on or off.
func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
