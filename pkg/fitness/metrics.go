package fitness

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/gpu"
)

// Sample is one value of a GPU counter, as Prometheus exposes it.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// metricMeta is a metric's type and help, as dcgm-exporter's counters file gives them for
// the metrics it names.
var metricMeta = map[string][2]string{
	"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         {"counter", "Total number of PCIe retries."},
	"DCGM_FI_DEV_PCIE_LINK_GEN":               {"gauge", "PCIe link generation now."},
	"DCGM_FI_DEV_PCIE_LINK_WIDTH":             {"gauge", "PCIe link width now (lanes)."},
	"DCGM_FI_DEV_PCIE_MAX_LINK_GEN":           {"gauge", "Most PCIe link generation the GPU and its slot can do."},
	"DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH":         {"gauge", "Most PCIe link width the GPU and its slot can do (lanes)."},
	"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":           {"counter", "Total number of double-bit volatile ECC errors."},
	"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL":           {"counter", "Total number of double-bit persistent ECC errors."},
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": {"counter", "Number of remapped rows for uncorrectable errors"},
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   {"counter", "Number of remapped rows for correctable errors"},
	"DCGM_FI_DEV_ROW_REMAP_FAILURE":           {"gauge", "Whether remapping of rows has failed"},
	"DCGM_FI_DEV_ROW_REMAP_PENDING":           {"gauge", "Whether remapping of rows is pending (until a GPU reset)"},
	"DCGM_FI_DEV_RETIRED_PENDING":             {"gauge", "Whether pages are pending retirement (until a GPU reset)"},
	"DCGM_FI_DEV_CLOCKS_EVENT_REASONS":        {"gauge", "Bit mask of the reasons the clocks are held down now (NVML clocks event reasons)."},
	"DCGM_FI_DEV_XID_ERRORS":                  {"gauge", "Value of the last XID error encountered (since boot, from the kernel log)."},
	"sglprov_gpu_xid_events":                  {"gauge", "Xid lines of the kernel log since boot, per GPU and code."},
	"sglprov_gpu_mig_enabled":                 {"gauge", "Whether MIG mode is on."},
	"sglprov_gpu_compute_processes":           {"gauge", "Compute processes on the GPU now."},
}

// Counters returns the cheap fitness counters of every GPU, named after dcgm-exporter's
// fields where one exists (so that a fleet's GPU dashboards and alerts apply) and labelled
// as it labels them (gpu, UUID, pci_bus_id, modelName).
func Counters(f *gpu.Facts) []Sample {
	if f == nil {
		return nil
	}
	var out []Sample
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, d := range f.GPUs {
		labels := map[string]string{"gpu": strconv.Itoa(d.Index), "UUID": d.UUID, "pci_bus_id": d.PCIBusID, "modelName": d.Name}
		add := func(name string, v float64) { out = append(out, Sample{Name: name, Labels: labels, Value: v}) }
		h := d.Health
		if h == nil {
			continue
		}
		if l := h.PCIe; l != nil {
			add("DCGM_FI_DEV_PCIE_LINK_GEN", float64(l.CurrentGen))
			add("DCGM_FI_DEV_PCIE_LINK_WIDTH", float64(l.CurrentWidth))
			add("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", float64(l.MaxGen))
			add("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", float64(l.MaxWidth))
			if l.ReplayCounter != nil {
				add("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", float64(*l.ReplayCounter))
			}
		}
		if e := h.ECC; e != nil && e.Enabled {
			add("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", float64(e.VolatileUncorrected))
			add("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", float64(e.AggregateUncorrected))
		}
		if r := h.RemappedRows; r != nil {
			add("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", float64(r.Uncorrected))
			add("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", float64(r.Corrected))
			add("DCGM_FI_DEV_ROW_REMAP_FAILURE", b2f(r.Failure))
			add("DCGM_FI_DEV_ROW_REMAP_PENDING", b2f(r.Pending))
		}
		if h.RetiredPagesPending != nil {
			add("DCGM_FI_DEV_RETIRED_PENDING", b2f(*h.RetiredPagesPending))
		}
		if h.ClocksEventReasons != nil {
			add("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", float64(*h.ClocksEventReasons))
		}
		if h.MIG != nil {
			add("sglprov_gpu_mig_enabled", b2f(*h.MIG))
		}
		if h.Processes != nil {
			add("sglprov_gpu_compute_processes", float64(len(*h.Processes)))
		}
		if f.Kernel != nil && f.Kernel.XidUnread == "" {
			last, counts := xidOf(f.Kernel.Xid, d)
			add("DCGM_FI_DEV_XID_ERRORS", float64(last))
			codes := make([]int, 0, len(counts))
			for c := range counts {
				codes = append(codes, c)
			}
			sort.Ints(codes)
			for _, c := range codes {
				l := map[string]string{"xid": strconv.Itoa(c)}
				for k, v := range labels {
					l[k] = v
				}
				out = append(out, Sample{Name: "sglprov_gpu_xid_events", Labels: l, Value: float64(counts[c])})
			}
		}
	}
	return out
}

// xidOf returns the last Xid code logged for d (0 with none) and the count per code.
func xidOf(xs []gpu.XidEvent, d gpu.Device) (int, map[int]int) {
	pci := driverPCI(d)
	last, counts := 0, map[int]int{}
	for _, x := range xs {
		if strings.EqualFold(x.PCI, pci) {
			last = x.Code
			counts[x.Code]++
		}
	}
	return last, counts
}

// WriteCounters writes samples in the Prometheus text format, each metric's HELP and TYPE
// once, before its first sample; extra labels (recipe, node) are added to every sample.
func WriteCounters(w io.Writer, samples []Sample, extra map[string]string) error {
	seen := map[string]bool{}
	var sb strings.Builder
	for _, s := range samples {
		if !seen[s.Name] {
			seen[s.Name] = true
			meta := metricMeta[s.Name]
			fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s %s\n", s.Name, meta[1], s.Name, meta[0])
		}
		keys := make([]string, 0, len(s.Labels)+len(extra))
		all := map[string]string{}
		for k, v := range extra {
			all[k] = v
		}
		for k, v := range s.Labels {
			all[k] = v
		}
		for k := range all {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + `="` + escapeLabel(all[k]) + `"`
		}
		fmt.Fprintf(&sb, "%s{%s} %s\n", s.Name, strings.Join(parts, ","), strconv.FormatFloat(s.Value, 'g', -1, 64))
	}
	_, err := io.WriteString(w, sb.String())
	if err != nil {
		return fmt.Errorf("writing GPU counters: %w", err)
	}
	return nil
}

func escapeLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(v)
}

// Worse reports what got worse from before to now that makes the node unfit to serve: a
// new uncorrectable ECC error, a new pending remap or remap failure, or a new Xid after
// which the GPU needs a reset. It names each, "" when nothing did; before nil means the
// first reading, when only what Check refuses counts.
func Worse(before, now *gpu.Facts) []string {
	if now == nil {
		return nil
	}
	var out []string
	prev := map[string]gpu.Device{}
	if before != nil {
		for _, d := range before.GPUs {
			prev[d.UUID] = d
		}
	}
	for _, d := range now.GPUs {
		h := d.Health
		if h == nil {
			continue
		}
		p := prev[d.UUID].Health
		if h.ECC != nil && h.ECC.VolatileUncorrected > 0 && (p == nil || p.ECC == nil || h.ECC.VolatileUncorrected > p.ECC.VolatileUncorrected) {
			out = append(out, fmt.Sprintf("%s: uncorrectable ECC errors since the driver loaded: %d", d.Label(), h.ECC.VolatileUncorrected))
		}
		if r := h.RemappedRows; r != nil && (r.Pending || r.Failure) && (p == nil || p.RemappedRows == nil || r.Pending != p.RemappedRows.Pending || r.Failure != p.RemappedRows.Failure) {
			out = append(out, fmt.Sprintf("%s: memory row remap pending %s, failed %s", d.Label(), yesNo(r.Pending), yesNo(r.Failure)))
		}
	}
	if now.Kernel != nil {
		seen := 0
		if before != nil && before.Kernel != nil {
			seen = len(before.Kernel.Xid)
		}
		if seen > len(now.Kernel.Xid) {
			seen = 0 // the log was cleared or rotated: read it all as new
		}
		for _, x := range now.Kernel.Xid[seen:] {
			if resetXids[x.Code] {
				out = append(out, "Xid "+strconv.Itoa(x.Code)+": "+x.Text)
			}
		}
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// CounterNames returns the names of every metric Counters may give, sorted.
func CounterNames() []string {
	out := make([]string, 0, len(metricMeta))
	for n := range metricMeta {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CounterMeta returns a metric's Prometheus type ("counter" or "gauge") and help text.
func CounterMeta(name string) (typ, help string) {
	m := metricMeta[name]
	return m[0], m[1]
}
