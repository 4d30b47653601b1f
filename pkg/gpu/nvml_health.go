package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// call runs one NVML read, turning a panic (a library or binding that lacks the call)
// into ERROR_FUNCTION_NOT_FOUND, so that one unreadable fact never ends detection.
func call[T any](f func() (T, nvml.Return)) (v T, r nvml.Return) {
	defer func() {
		if p := recover(); p != nil {
			r = nvml.ERROR_FUNCTION_NOT_FOUND
		}
	}()
	return f()
}

// health reads the fitness facts of one GPU. A call that fails leaves its field nil and
// is named in Unread with NVML's reason, except ERROR_NOT_SUPPORTED (the GPU has no such
// thing: no ECC on a GeForce, no MIG on an RTX PRO 6000), which is left out silently.
func health(h nvml.Device) *Health {
	out := &Health{}
	unread := func(what string, r nvml.Return) {
		if r != nvml.ERROR_NOT_SUPPORTED {
			out.Unread = append(out.Unread, fmt.Sprintf("%s: %s", what, returnName(r)))
		}
	}
	for _, read := range healthReads {
		read(h, out, unread)
	}
	return out
}

// unreadFunc names a fact that could not be read, with NVML's reason.
type unreadFunc func(what string, r nvml.Return)

// healthReads read the fitness facts into a Health, in the order Unread names them.
var healthReads = []func(h nvml.Device, out *Health, unread unreadFunc){
	readPCIe,
	readECC,
	readRemappedRows,
	readRetiredPagesPending,
	readClocksEventReasons,
	readPersistenceMode,
	readComputeMode,
	readMIG,
	readProcesses,
}

// readPCIe reads the PCIe link: its generation and width, now and at most, and the
// replay counter.
func readPCIe(h nvml.Device, out *Health, unread unreadFunc) {
	cg, r1 := call(h.GetCurrPcieLinkGeneration)
	mg, r2 := call(h.GetMaxPcieLinkGeneration)
	cw, r3 := call(h.GetCurrPcieLinkWidth)
	mw, r4 := call(h.GetMaxPcieLinkWidth)
	for _, r := range []nvml.Return{r1, r2, r3, r4} {
		if r != nvml.SUCCESS {
			unread("pcie link", r)
			return
		}
	}
	// The GPU's own maximum generation, when lower than the slot's, is the one to
	// compare with (a Gen5 GPU in a Gen4 slot trains at Gen4 at most).
	if gmg, r := call(h.GetGpuMaxPcieLinkGeneration); r == nvml.SUCCESS && gmg > 0 && gmg < mg {
		mg = gmg
	}
	out.PCIe = &PCIeLink{CurrentGen: cg, MaxGen: mg, CurrentWidth: cw, MaxWidth: mw}
	if rc, r := call(h.GetPcieReplayCounter); r == nvml.SUCCESS {
		v := uint64(rc)
		out.PCIe.ReplayCounter = &v
	}
}

// readECC reads the ECC mode and, when it is on, the uncorrected error counts.
func readECC(h nvml.Device, out *Health, unread unreadFunc) {
	cur, pend, r := call2(h.GetEccMode)
	if r != nvml.SUCCESS {
		unread("ecc mode", r)
		return
	}
	e := &ECC{Enabled: cur == nvml.FEATURE_ENABLED, Pending: pend == nvml.FEATURE_ENABLED}
	if e.Enabled {
		vol, rv := call(func() (uint64, nvml.Return) {
			return h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		})
		agg, ra := call(func() (uint64, nvml.Return) {
			return h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
		})
		if rv != nvml.SUCCESS {
			unread("ecc volatile uncorrected", rv)
		}
		if ra != nvml.SUCCESS {
			unread("ecc aggregate uncorrected", ra)
		}
		e.VolatileUncorrected, e.AggregateUncorrected = vol, agg
	}
	out.ECC = e
}

// readRemappedRows reads the memory rows remapped, and whether a remap is pending or
// failed.
func readRemappedRows(h nvml.Device, out *Health, unread unreadFunc) {
	rr, r := call(func() (RemappedRows, nvml.Return) {
		c, u, p, f, r := h.GetRemappedRows()
		return RemappedRows{Corrected: c, Uncorrected: u, Pending: p, Failure: f}, r
	})
	if r != nvml.SUCCESS {
		unread("remapped rows", r)
		return
	}
	out.RemappedRows = &rr
}

// readRetiredPagesPending reads whether retired pages wait for a reset.
func readRetiredPagesPending(h nvml.Device, out *Health, unread unreadFunc) {
	rp, r := call(h.GetRetiredPagesPendingStatus)
	if r != nvml.SUCCESS {
		unread("retired pages pending", r)
		return
	}
	v := rp == nvml.FEATURE_ENABLED
	out.RetiredPagesPending = &v
}

// readClocksEventReasons reads why the clocks are held down now.
func readClocksEventReasons(h nvml.Device, out *Health, unread unreadFunc) {
	m, r := call(h.GetCurrentClocksEventReasons)
	if r != nvml.SUCCESS {
		unread("clocks event reasons", r)
		return
	}
	out.ClocksEventReasons = &m
}

// readPersistenceMode reads whether persistence mode is on.
func readPersistenceMode(h nvml.Device, out *Health, unread unreadFunc) {
	pm, r := call(h.GetPersistenceMode)
	if r != nvml.SUCCESS {
		unread("persistence mode", r)
		return
	}
	v := pm == nvml.FEATURE_ENABLED
	out.PersistenceMode = &v
}

// readComputeMode reads the compute mode, named as nvidia-smi names it.
func readComputeMode(h nvml.Device, out *Health, unread unreadFunc) {
	cm, r := call(h.GetComputeMode)
	if r != nvml.SUCCESS {
		unread("compute mode", r)
		return
	}
	out.ComputeMode = computeModeName(cm)
}

// readMIG reads whether MIG is on, and whether it will be after a reset.
func readMIG(h nvml.Device, out *Health, unread unreadFunc) {
	mc, mp, r := call2(h.GetMigMode)
	if r != nvml.SUCCESS {
		unread("mig mode", r)
		return
	}
	c, p := mc == nvml.DEVICE_MIG_ENABLE, mp == nvml.DEVICE_MIG_ENABLE
	out.MIG, out.MIGPending = &c, &p
}

// readProcesses reads the compute processes on the GPU and the memory each uses.
func readProcesses(h nvml.Device, out *Health, unread unreadFunc) {
	ps, r := call(h.GetComputeRunningProcesses)
	if r != nvml.SUCCESS {
		unread("compute processes", r)
		return
	}
	procs := make([]Process, 0, len(ps))
	for _, p := range ps {
		procs = append(procs, Process{PID: p.Pid, UsedMemoryByte: p.UsedGpuMemory})
	}
	out.Processes = &procs
}

// call2 is call for NVML reads that return two values.
func call2[A, B any](f func() (A, B, nvml.Return)) (a A, b B, r nvml.Return) {
	defer func() {
		if p := recover(); p != nil {
			r = nvml.ERROR_FUNCTION_NOT_FOUND
		}
	}()
	return f()
}

// computeModeName names an NVML compute mode as nvidia-smi does.
func computeModeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "default"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "exclusive_thread"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "prohibited"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "exclusive_process"
	}
	return fmt.Sprintf("mode%d", int(m))
}

// topology reads the link of every pair of GPUs: the common PCIe ancestor, NVLinks between
// them and NVML's P2P read and write status. A pair whose level cannot be read is left
// out; a P2P status that cannot be read is "unknown".
func topology(handles []nvml.Device, busIDs []string) []Link {
	var links []Link
	for i := range handles {
		for j := i + 1; j < len(handles); j++ {
			a, b := handles[i], handles[j]
			if a == nil || b == nil {
				continue
			}
			lvl, r := call(func() (nvml.GpuTopologyLevel, nvml.Return) { return a.GetTopologyCommonAncestor(b) })
			if r != nvml.SUCCESS {
				continue
			}
			l := Link{A: i, B: j, Level: topologyName(int(lvl))}
			if n := nvlinksBetween(a, b, busIDs[j]); n > 0 {
				l.Level = fmt.Sprintf("NV%d", n)
			}
			l.P2PRead = p2pStatus(a, b, nvml.P2P_CAPS_INDEX_READ)
			l.P2PWrite = p2pStatus(a, b, nvml.P2P_CAPS_INDEX_WRITE)
			links = append(links, l)
		}
	}
	return links
}

// p2pStatus reads NVML's P2P status from a to b for idx, "unknown" when it cannot.
func p2pStatus(a, b nvml.Device, idx nvml.GpuP2PCapsIndex) string {
	s, r := call(func() (nvml.GpuP2PStatus, nvml.Return) { return a.GetP2PStatus(b, idx) })
	if r != nvml.SUCCESS {
		return "unknown"
	}
	return p2pName(int(s))
}

// nvlinksBetween counts the active NVLinks of a that end at b; on a host whose NVLinks end
// at NVSwitches (HGX), where no link ends at b, it counts a's active links when NVML says
// b is reachable over NVLink, as nvidia-smi's NV<n> does.
func nvlinksBetween(a, b nvml.Device, bBus string) int {
	direct, active := 0, 0
	for link := range nvml.NVLINK_MAX_LINKS {
		st, r := call(func() (nvml.EnableState, nvml.Return) { return a.GetNvLinkState(link) })
		if r != nvml.SUCCESS {
			if r == nvml.ERROR_NOT_SUPPORTED || r == nvml.ERROR_INVALID_ARGUMENT || r == nvml.ERROR_FUNCTION_NOT_FOUND {
				break
			}
			continue
		}
		if st != nvml.FEATURE_ENABLED {
			continue
		}
		active++
		if pci, r := call(func() (nvml.PciInfo, nvml.Return) { return a.GetNvLinkRemotePciInfo(link) }); r == nvml.SUCCESS &&
			samePCI(cString(pci.BusId[:]), bBus) {
			direct++
		}
	}
	if direct > 0 {
		return direct
	}
	if active > 0 && p2pStatus(a, b, nvml.P2P_CAPS_INDEX_NVLINK) == "OK" {
		return active
	}
	return 0
}

// samePCI compares two PCI addresses whatever the width of their domain ("00000000:18:00.0"
// and "0000:18:00.0").
func samePCI(a, b string) bool {
	return a != "" && SysfsPCI(a) == SysfsPCI(b)
}
