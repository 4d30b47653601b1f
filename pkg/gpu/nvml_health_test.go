package gpu

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
)

// healthMock adds the fitness calls to a mocked device: a Gen5 x16 slot whose link trained
// at gen/width, the given ECC, remap and process state.
func healthMock(d *mock.Device, gen, width int, eccVol uint64, remapPending bool, procs []nvml.ProcessInfo) {
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return gen, nvml.SUCCESS }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetGpuMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return width, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return 3, nvml.SUCCESS }
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if c == nvml.VOLATILE_ECC {
			return eccVol, nvml.SUCCESS
		}
		return eccVol + 1, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 2, 1, remapPending, false, nvml.SUCCESS }
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0x1 | 0x8, nvml.SUCCESS }
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
	d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
}

func TestNVMLHealth(t *testing.T) {
	second := withUUID(blackwell, "GPU-66666666-7777-8888-9999-000000000000", "00000000:2A:00.0")
	m, devs := newMock(nvml.SUCCESS, blackwell, second)
	healthMock(devs[0], 5, 16, 0, false, []nvml.ProcessInfo{})
	healthMock(devs[1], 4, 8, 2, true, []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 80 << 30}})
	devs[0].GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
	}
	devs[0].GetP2PStatusFunc = func(_ nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		if idx == nvml.P2P_CAPS_INDEX_WRITE {
			return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, nvml.SUCCESS
		}
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	f, err := mockDetector(m).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	three := uint64(3)
	clocks := uint64(0x9)
	yes := true
	none := []Process{}
	want0 := &Health{
		PCIe:               &PCIeLink{CurrentGen: 5, MaxGen: 5, CurrentWidth: 16, MaxWidth: 16, ReplayCounter: &three},
		ECC:                &ECC{Enabled: true, Pending: true, VolatileUncorrected: 0, AggregateUncorrected: 1},
		RemappedRows:       &RemappedRows{Corrected: 2, Uncorrected: 1},
		ClocksEventReasons: &clocks,
		PersistenceMode:    &yes,
		ComputeMode:        "default",
		Processes:          &none,
	}
	if diff := cmp.Diff(want0, f.GPUs[0].Health); diff != "" {
		t.Errorf("GPU 0 health (-want +got):\n%s", diff)
	}
	h1 := f.GPUs[1].Health
	if h1.PCIe.CurrentGen != 4 || h1.PCIe.CurrentWidth != 8 || h1.ECC.VolatileUncorrected != 2 || !h1.RemappedRows.Pending {
		t.Errorf("GPU 1 health = %+v %+v %+v", h1.PCIe, h1.ECC, h1.RemappedRows)
	}
	if h1.Processes == nil || len(*h1.Processes) != 1 || (*h1.Processes)[0].PID != 4242 {
		t.Errorf("GPU 1 processes = %v, want pid 4242", h1.Processes)
	}
	wantTopo := []Link{{A: 0, B: 1, Level: "PHB", P2PRead: "OK", P2PWrite: "chipset_not_supported"}}
	if diff := cmp.Diff(wantTopo, f.Topology); diff != "" {
		t.Errorf("topology (-want +got):\n%s", diff)
	}
	if got := ClockReasonNames(clocks); !cmp.Equal(got, []string{"gpu_idle", "hw_slowdown"}) {
		t.Errorf("clock reasons = %v", got)
	}
}

// A driver that lacks a call, or a call that fails, leaves that fact unknown and named,
// never ends detection.
func TestNVMLHealthUnreadable(t *testing.T) {
	m, devs := newMock(nvml.SUCCESS, blackwell)
	healthMock(devs[0], 5, 16, 0, false, nil)
	devs[0].GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
	devs[0].GetComputeRunningProcessesFunc = nil // the binding panics: as if the library lacked it
	f, err := mockDetector(m).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	h := f.GPUs[0].Health
	if h.ECC != nil || h.Processes != nil {
		t.Errorf("ECC %v, processes %v: want unknown", h.ECC, h.Processes)
	}
	want := []string{"ecc mode: ERROR_UNKNOWN", "compute processes: ERROR_FUNCTION_NOT_FOUND"}
	if diff := cmp.Diff(want, h.Unread); diff != "" {
		t.Errorf("unread (-want +got):\n%s", diff)
	}
	if h.PCIe == nil {
		t.Error("the PCIe link was read: want it kept")
	}
}

func TestNVLinkLevel(t *testing.T) {
	second := withUUID(blackwell, "GPU-66666666-7777-8888-9999-000000000000", "00000000:2A:00.0")
	m, devs := newMock(nvml.SUCCESS, blackwell, second)
	devs[0].GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	devs[0].GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	// 18 links, each ending at an NVSwitch (not at GPU 1), as on an HGX H200 board.
	devs[0].GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if link < 18 {
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	devs[0].GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
		return nvml.PciInfo{BusId: busID("00000000:C1:00.0")}, nvml.SUCCESS
	}
	f, err := mockDetector(m).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if len(f.Topology) != 1 || f.Topology[0].Level != "NV18" {
		t.Errorf("topology = %+v, want NV18", f.Topology)
	}
}
