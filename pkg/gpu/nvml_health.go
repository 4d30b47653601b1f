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

	cg, r1 := call(h.GetCurrPcieLinkGeneration)
	mg, r2 := call(h.GetMaxPcieLinkGeneration)
	cw, r3 := call(h.GetCurrPcieLinkWidth)
	mw, r4 := call(h.GetMaxPcieLinkWidth)
	if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS && r3 == nvml.SUCCESS && r4 == nvml.SUCCESS {
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
	} else {
		for _, r := range []nvml.Return{r1, r2, r3, r4} {
			if r != nvml.SUCCESS {
				unread("pcie link", r)
				break
			}
		}
	}

	cur, pend, r := call2(h.GetEccMode)
	if r == nvml.SUCCESS {
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
	} else {
		unread("ecc mode", r)
	}

	if rr, r := call(func() (RemappedRows, nvml.Return) {
		c, u, p, f, r := h.GetRemappedRows()
		return RemappedRows{Corrected: c, Uncorrected: u, Pending: p, Failure: f}, r
	}); r == nvml.SUCCESS {
		out.RemappedRows = &rr
	} else {
		unread("remapped rows", r)
	}
	if rp, r := call(h.GetRetiredPagesPendingStatus); r == nvml.SUCCESS {
		v := rp == nvml.FEATURE_ENABLED
		out.RetiredPagesPending = &v
	} else {
		unread("retired pages pending", r)
	}
	if m, r := call(h.GetCurrentClocksEventReasons); r == nvml.SUCCESS {
		out.ClocksEventReasons = &m
	} else {
		unread("clocks event reasons", r)
	}
	if pm, r := call(h.GetPersistenceMode); r == nvml.SUCCESS {
		v := pm == nvml.FEATURE_ENABLED
		out.PersistenceMode = &v
	} else {
		unread("persistence mode", r)
	}
	if cm, r := call(h.GetComputeMode); r == nvml.SUCCESS {
		out.ComputeMode = computeModeName(cm)
	} else {
		unread("compute mode", r)
	}
	if mc, mp, r := call2(h.GetMigMode); r == nvml.SUCCESS {
		c, p := mc == nvml.DEVICE_MIG_ENABLE, mp == nvml.DEVICE_MIG_ENABLE
		out.MIG, out.MIGPending = &c, &p
	} else {
		unread("mig mode", r)
	}
	if ps, r := call(h.GetComputeRunningProcesses); r == nvml.SUCCESS {
		procs := make([]Process, 0, len(ps))
		for _, p := range ps {
			procs = append(procs, Process{PID: p.Pid, UsedMemoryByte: p.UsedGpuMemory})
		}
		out.Processes = &procs
	} else {
		unread("compute processes", r)
	}
	return out
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
