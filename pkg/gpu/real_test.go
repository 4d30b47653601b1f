package gpu

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

// TestRealNVML runs the detector against the host's own NVML: on a host without the
// driver that checks go-nvml's failed dlopen becomes ErrNoLibrary; on a GPU host it checks
// the facts read.
func TestRealNVML(t *testing.T) {
	f, err := NewNVMLDetector(nvml.New()).Detect(context.Background())
	switch {
	case errors.Is(err, ErrNoLibrary):
		if err.Error() != "NVML library not found: is the NVIDIA driver installed?" {
			t.Errorf("error = %q", err)
		}
		t.Logf("no NVML on this host: %v", err)
		return
	case errors.Is(err, ErrDriverMismatch):
		t.Skipf("this host needs a reboot: %v", err)
	case err != nil && strings.HasPrefix(err.Error(), "initializing NVML"):
		t.Skipf("NVML cannot start on this host: %v", err)
	case err != nil && !errors.Is(err, ErrNoGPU):
		t.Fatalf("Detect: %v", err)
	}
	if f.DriverVersion == "" || f.CUDAVersion() == "" || f.Source != "nvml" {
		t.Errorf("facts = %+v, want driver and CUDA versions", f)
	}
	for _, d := range f.GPUs {
		if !uuidPattern.MatchString(d.UUID) || !ccPattern.MatchString(d.ComputeCapability) || d.PCIBusID == "" {
			t.Errorf("GPU %d = %+v: malformed", d.Index, d)
		}
	}
	var buf bytes.Buffer
	if err := FormatTable(&buf, f); err != nil {
		t.Fatal(err)
	}
	t.Logf("arch list %q\n%s", f.ArchList(), buf.String())

	// With the library open (as it stays after Init reports a mismatch), its file name
	// in the process maps gives its version: on a healthy host, the driver's.
	lib := nvml.New()
	if r := lib.Init(); r != nvml.SUCCESS {
		t.Fatalf("Init: %v", r)
	}
	defer lib.Shutdown()
	d := NewNVMLDetector(lib)
	if got := d.libraryVersion(); got != f.DriverVersion {
		t.Errorf("library version from the process maps = %q, want %q", got, f.DriverVersion)
	}
	if got := d.moduleVersion(); got != f.DriverVersion {
		t.Errorf("kernel module version = %q, want %q", got, f.DriverVersion)
	}
}

// TestRealSMI compares what nvidia-smi reports with what NVML reports, on a host that has
// both.
func TestRealSMI(t *testing.T) {
	if _, err := exec.LookPath("nvidia-smi"); err != nil {
		t.Skip("no nvidia-smi on this host")
	}
	want, err := NewNVMLDetector(nvml.New()).Detect(context.Background())
	if err != nil {
		t.Skipf("NVML: %v", err)
	}
	got, err := (&SMIDetector{}).Detect(context.Background())
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	want.Source, want.NVMLVersion = "nvidia-smi", ""
	// nvidia-smi's CSV query gives none of the fitness facts.
	want.Topology, want.Kernel = nil, nil
	for i := range want.GPUs {
		want.GPUs[i].Health = nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nvidia-smi facts differ from NVML's (-nvml +nvidia-smi):\n%s", diff)
	}
}
