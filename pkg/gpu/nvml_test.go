package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// mockDetector is NewNVMLDetector for a mocked NVML: it reads nothing of this host's kernel.
func mockDetector(m nvml.Interface) *NVMLDetector {
	d := NewNVMLDetector(m)
	d.Kernel = nil
	return d
}

// fakeGPU describes one mocked device and which of its calls fails.
type fakeGPU struct {
	name, uuid string
	major      int
	minor      int
	mem        uint64
	busID      string
	fail       string // "GetName", "GetUUID", ...: that call returns failRet
	failRet    nvml.Return
}

func (g fakeGPU) ret(call string) nvml.Return {
	if g.fail == call {
		return g.failRet
	}
	return nvml.SUCCESS
}

func busID(s string) [32]int8 {
	var b [32]int8
	for i := range len(s) {
		b[i] = int8(s[i])
	}
	return b
}

func (g fakeGPU) device() *mock.Device {
	return &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return g.name, g.ret("GetName") },
		GetUUIDFunc: func() (string, nvml.Return) { return g.uuid, g.ret("GetUUID") },
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) {
			return g.major, g.minor, g.ret("GetCudaComputeCapability")
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: g.mem, Free: g.mem / 2, Used: g.mem / 2}, g.ret("GetMemoryInfo")
		},
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{BusId: busID(g.busID)}, g.ret("GetPciInfo")
		},
	}
}

// newMock returns a mocked NVML whose Init returns initRet, with the given devices.
func newMock(initRet nvml.Return, gpus ...fakeGPU) (*mock.Interface, []*mock.Device) {
	devs := make([]*mock.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = g.device()
	}
	m := &mock.Interface{
		InitFunc:                       func() nvml.Return { return initRet },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580.95.05", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		SystemGetNVMLVersionFunc:       func() (string, nvml.Return) { return "13.580.95.05", nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		ErrorStringFunc: func(r nvml.Return) string { return "mocked error string" },
	}
	return m, devs
}

var blackwell = fakeGPU{
	name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", uuid: "GPU-11111111-2222-3333-4444-555555555555",
	major: 12, minor: 0, mem: 102642155520, busID: "00000000:18:00.0",
}

func withUUID(g fakeGPU, uuid, bus string) fakeGPU {
	g.uuid, g.busID = uuid, bus
	return g
}

// callsAfterInit counts every recorded call of the mock other than Init.
func callsAfterInit(m *mock.Interface) map[string]int {
	return map[string]int{
		"Shutdown":                   len(m.ShutdownCalls()),
		"SystemGetDriverVersion":     len(m.SystemGetDriverVersionCalls()),
		"SystemGetCudaDriverVersion": len(m.SystemGetCudaDriverVersionCalls()),
		"SystemGetNVMLVersion":       len(m.SystemGetNVMLVersionCalls()),
		"DeviceGetCount":             len(m.DeviceGetCountCalls()),
		"DeviceGetHandleByIndex":     len(m.DeviceGetHandleByIndexCalls()),
		"ErrorString":                len(m.ErrorStringCalls()),
	}
}

func TestNVMLDetectTwoDevices(t *testing.T) {
	second := withUUID(blackwell, "GPU-66666666-7777-8888-9999-000000000000", "00000000:2A:00.0")
	m, devs := newMock(nvml.SUCCESS, blackwell, second)
	f, err := mockDetector(m).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	want := &Facts{
		DriverVersion:     "580.95.05",
		CUDADriverVersion: 13000,
		NVMLVersion:       "13.580.95.05",
		Source:            "nvml",
		GPUs: []Device{
			{Index: 0, Name: blackwell.name, UUID: blackwell.uuid, ComputeCapability: "12.0", MemoryTotalBytes: 102642155520, PCIBusID: "00000000:18:00.0"},
			{Index: 1, Name: blackwell.name, UUID: second.uuid, ComputeCapability: "12.0", MemoryTotalBytes: 102642155520, PCIBusID: "00000000:2A:00.0"},
		},
	}
	// The fitness facts are TestNVMLHealth's: this mock has none of their calls.
	if diff := cmp.Diff(want, f, cmpopts.IgnoreFields(Device{}, "Health")); diff != "" {
		t.Errorf("facts (-want +got):\n%s", diff)
	}
	if n := len(m.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want 1", n)
	}
	if n := len(m.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	for i, d := range devs {
		if len(d.GetNameCalls()) != 1 || len(d.GetPciInfoCalls()) != 1 {
			t.Errorf("device %d: GetName %d calls, GetPciInfo %d calls, want 1 each", i, len(d.GetNameCalls()), len(d.GetPciInfoCalls()))
		}
	}
}

func TestNVMLInitFailureCallsNothingElse(t *testing.T) {
	dir := t.TempDir()
	modFile := filepath.Join(dir, "version")
	mapsFile := filepath.Join(dir, "maps")
	writeFile(t, modFile, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Sep 18 21:28:23 UTC 2025\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
	writeFile(t, mapsFile, "7f1c2a000000-7f1c2a100000 r--p 00000000 103:02 1234  /usr/lib/x86_64-linux-gnu/libc.so.6\n"+
		"7f1c2b000000-7f1c2b200000 r-xp 00000000 103:02 5678  /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.590.44.01\n")
	libDir := filepath.Join(dir, "lib")
	writeFile(t, filepath.Join(libDir, "libnvidia-ml.so.1"), "")
	writeFile(t, filepath.Join(libDir, "libnvidia-ml.so.590.48.01"), "")
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name      string
		ret       nvml.Return
		modFile   string
		mapsFile  string
		globs     []string
		wantIs    error
		wantExact string
		wantHas   []string
	}{
		{
			name:      "library not found",
			ret:       nvml.ERROR_LIBRARY_NOT_FOUND,
			wantIs:    ErrNoLibrary,
			wantExact: "NVML library not found: is the NVIDIA driver installed?",
		},
		{
			name: "mismatch with both versions", ret: nvml.ERROR_LIB_RM_VERSION_MISMATCH,
			modFile: modFile, mapsFile: mapsFile, globs: []string{missing},
			wantIs:    ErrDriverMismatch,
			wantExact: "NVIDIA driver/library version mismatch: loaded kernel module is 580.95.05, NVML library is 590.44.01: reboot required",
		},
		{
			name: "mismatch, library version from its file name", ret: nvml.ERROR_LIB_RM_VERSION_MISMATCH,
			modFile: modFile, mapsFile: missing, globs: []string{filepath.Join(libDir, "libnvidia-ml.so.*")},
			wantIs:  ErrDriverMismatch,
			wantHas: []string{"kernel module is 580.95.05", "NVML library is 590.48.01", "reboot required"},
		},
		{
			name: "mismatch, versions unknown", ret: nvml.ERROR_LIB_RM_VERSION_MISMATCH,
			modFile: missing, mapsFile: missing, globs: []string{missing},
			wantIs:    ErrDriverMismatch,
			wantExact: "NVIDIA driver/library version mismatch: reboot required",
		},
		{
			name: "kernel module not loaded", ret: nvml.ERROR_DRIVER_NOT_LOADED,
			wantHas: []string{"initializing NVML", "kernel module is not loaded"},
		},
		{
			name: "other failure", ret: nvml.ERROR_UNKNOWN,
			wantHas: []string{"initializing NVML: ERROR_UNKNOWN"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, devs := newMock(tt.ret, blackwell)
			d := mockDetector(m)
			d.ModuleVersionFile, d.MapsFile, d.LibraryGlobs = tt.modFile, tt.mapsFile, tt.globs
			f, err := d.Detect(context.Background())
			if err == nil || f != nil {
				t.Fatalf("Detect = %v, %v; want nil facts and an error", f, err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q is not %v", err, tt.wantIs)
			}
			if tt.wantExact != "" && err.Error() != tt.wantExact {
				t.Errorf("error = %q, want %q", err, tt.wantExact)
			}
			for _, s := range tt.wantHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if n := len(m.InitCalls()); n != 1 {
				t.Errorf("Init called %d times, want 1", n)
			}
			for call, n := range callsAfterInit(m) {
				if n != 0 {
					t.Errorf("%s called %d times after a failed Init", call, n)
				}
			}
			if n := len(devs[0].GetNameCalls()); n != 0 {
				t.Errorf("device GetName called %d times after a failed Init", n)
			}
		})
	}
}

func TestNVMLDeviceCallFailsHalfway(t *testing.T) {
	for _, call := range []string{"GetName", "GetUUID", "GetCudaComputeCapability", "GetMemoryInfo", "GetPciInfo"} {
		t.Run(call, func(t *testing.T) {
			bad := withUUID(blackwell, "GPU-66666666-7777-8888-9999-000000000000", "00000000:2A:00.0")
			bad.fail, bad.failRet = call, nvml.ERROR_GPU_IS_LOST
			third := withUUID(blackwell, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "00000000:3A:00.0")
			m, devs := newMock(nvml.SUCCESS, blackwell, bad, third)
			f, err := mockDetector(m).Detect(context.Background())
			if err == nil || f != nil {
				t.Fatalf("Detect = %v, %v; want nil facts and an error", f, err)
			}
			want := "reading GPU 1: nvmlDevice" + call + ": "
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error = %q, want it to start with %q", err, want)
			}
			if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
				t.Errorf("error %q does not wrap ERROR_GPU_IS_LOST", err)
			}
			if n := len(m.ShutdownCalls()); n != 1 {
				t.Errorf("Shutdown called %d times, want 1", n)
			}
			if n := len(devs[2].GetNameCalls()); n != 0 {
				t.Errorf("GPU 2 read after GPU 1 failed")
			}
		})
	}
}

func TestNVMLHandleFails(t *testing.T) {
	m, _ := newMock(nvml.SUCCESS, blackwell)
	m.DeviceGetCountFunc = func() (int, nvml.Return) { return 2, nvml.SUCCESS }
	_, err := mockDetector(m).Detect(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "reading GPU 1: nvmlDeviceGetHandleByIndex: ") {
		t.Fatalf("error = %v, want it to name GPU 1 and nvmlDeviceGetHandleByIndex", err)
	}
}

func TestNVMLHostCallFails(t *testing.T) {
	m, _ := newMock(nvml.SUCCESS, blackwell)
	m.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	_, err := mockDetector(m).Detect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "nvmlSystemGetCudaDriverVersion") || !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Fatalf("error = %v, want it to name nvmlSystemGetCudaDriverVersion", err)
	}
	if n := len(m.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	if n := len(m.DeviceGetCountCalls()); n != 0 {
		t.Errorf("DeviceGetCount called after a failed host call")
	}
}

func TestNVMLZeroGPUs(t *testing.T) {
	m, _ := newMock(nvml.SUCCESS)
	f, err := mockDetector(m).Detect(context.Background())
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("error = %v, want ErrNoGPU", err)
	}
	if f == nil || f.DriverVersion != "580.95.05" || f.CUDAVersion() != "13.0" || len(f.GPUs) != 0 {
		t.Errorf("facts = %+v, want the driver and CUDA versions and no GPU", f)
	}
	if n := len(m.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

func TestNVMLMemoryNotSupported(t *testing.T) {
	g := fakeGPU{name: "NVIDIA GB10", uuid: "GPU-0a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e", major: 12, minor: 1,
		busID: "0000000F:01:00.0", fail: "GetMemoryInfo", failRet: nvml.ERROR_NOT_SUPPORTED}
	m, _ := newMock(nvml.SUCCESS, g)
	f, err := mockDetector(m).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if got := f.GPUs[0]; got.MemoryTotalBytes != 0 || got.ComputeCapability != "12.1" {
		t.Errorf("GPU 0 = %+v, want unknown (0) memory and CC 12.1", got)
	}
}

func TestNVMLNVMLVersionOptional(t *testing.T) {
	m, _ := newMock(nvml.SUCCESS, blackwell)
	m.SystemGetNVMLVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_NOT_SUPPORTED }
	f, err := mockDetector(m).Detect(context.Background())
	if err != nil || f.NVMLVersion != "" {
		t.Fatalf("Detect = %+v, %v; want facts without an NVML version", f, err)
	}
}

func TestNVMLCanceled(t *testing.T) {
	m, _ := newMock(nvml.SUCCESS, blackwell)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := mockDetector(m).Detect(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if n := len(m.InitCalls()); n != 0 {
		t.Errorf("Init called %d times on a canceled context", n)
	}
}

func TestNVMLInitPanics(t *testing.T) {
	m, _ := newMock(nvml.SUCCESS, blackwell)
	m.InitFunc = func() nvml.Return { panic("symbol not found") }
	_, err := mockDetector(m).Detect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "symbol not found") {
		t.Fatalf("error = %v, want the panic as an error", err)
	}
	for call, n := range callsAfterInit(m) {
		if n != 0 {
			t.Errorf("%s called %d times after a failed Init", call, n)
		}
	}
}

func TestParseModuleVersion(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"proprietary", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0\n", "550.54.15"},
		{"open", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)  Thu Sep 18 21:28:23 UTC 2025\n", "580.95.05"},
		{"aarch64", "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build\n", "580.95.05"},
		{"no version", "garbage\n580.1\n", ""},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseModuleVersion([]byte(tt.text)); got != tt.want {
				t.Errorf("ParseModuleVersion = %q, want %q", got, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
