package gpu

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fixture returns the path of a shared fixture file.
func fixture(name string) string {
	return filepath.Join("..", "..", "testdata", "gpu", name)
}

// loadFixture loads a shared fixture that must have GPUs.
func loadFixture(t *testing.T, name string) *Facts {
	t.Helper()
	f, err := LoadFixture(fixture(name))
	if err != nil {
		t.Fatalf("LoadFixture(%s): %v", name, err)
	}
	return f
}

var uuidPattern = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestFixtureFiles(t *testing.T) {
	tests := []struct {
		file      string
		count     int
		name      string
		cc        string
		memBytes  uint64
		driver    string
		cuda      string
		archList  string
		wantErrIs error
		wantErr   string
	}{
		{file: "rtx-pro-6000-x8.json", count: 8, name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", cc: "12.0", memBytes: 102642155520, driver: "580.95.05", cuda: "13.0", archList: "12.0a"},
		{file: "rtx-pro-6000-x8-driver-590.json", count: 8, name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", cc: "12.0", memBytes: 102642155520, driver: "590.44.01", cuda: "13.1", archList: "12.0a"},
		{file: "h200-x1.json", count: 1, name: "NVIDIA H200", cc: "9.0", memBytes: 150754820096, driver: "570.172.08", cuda: "12.8", archList: "9.0a"},
		{file: "h100-x8.json", count: 8, name: "NVIDIA H100 80GB HBM3", cc: "9.0", memBytes: 85520809984, driver: "550.54.15", cuda: "12.4", archList: "9.0a"},
		{file: "mixed.json", count: 8, name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", cc: "8.9", memBytes: 102642155520, driver: "580.95.05", cuda: "13.0", archList: "8.9;12.0a"},
		{file: "none.json", count: 0, driver: "580.95.05", cuda: "13.0", wantErrIs: ErrNoGPU},
		{file: "mismatch.json", wantErrIs: ErrDriverMismatch,
			wantErr: "NVIDIA driver/library version mismatch: loaded kernel module is 580.95.05, NVML library is 590.44.01: reboot required"},
		{file: "nolib.json", wantErrIs: ErrNoLibrary, wantErr: "NVML library not found: is the NVIDIA driver installed?"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := LoadFixture(fixture(tt.file))
			if tt.wantErrIs != nil {
				if !errors.Is(err, tt.wantErrIs) {
					t.Fatalf("error = %v, want %v", err, tt.wantErrIs)
				}
				if tt.wantErr != "" && err.Error() != tt.wantErr {
					t.Errorf("error = %q, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("LoadFixture: %v", err)
			}
			if tt.driver == "" {
				if f != nil {
					t.Errorf("facts = %+v, want none with the error", f)
				}
				return
			}
			if f.Count() != tt.count || f.DriverVersion != tt.driver || f.CUDAVersion() != tt.cuda {
				t.Errorf("count %d driver %q CUDA %q, want %d %q %q", f.Count(), f.DriverVersion, f.CUDAVersion(), tt.count, tt.driver, tt.cuda)
			}
			if f.Source != "fixture:"+fixture(tt.file) {
				t.Errorf("source = %q", f.Source)
			}
			if got := f.ComputeCapability(); got != tt.cc {
				t.Errorf("ComputeCapability = %q, want %q", got, tt.cc)
			}
			if got := f.ArchList(); got != tt.archList {
				t.Errorf("ArchList = %q, want %q", got, tt.archList)
			}
			uuids := map[string]bool{}
			for i, d := range f.GPUs {
				if d.Index != i {
					t.Errorf("GPU at %d has index %d", i, d.Index)
				}
				if !uuidPattern.MatchString(d.UUID) || uuids[d.UUID] {
					t.Errorf("GPU %d: UUID %q malformed or repeated", i, d.UUID)
				}
				uuids[d.UUID] = true
			}
			if tt.count > 0 && (f.GPUs[0].Name != tt.name || f.GPUs[0].MemoryTotalBytes != tt.memBytes) {
				t.Errorf("GPU 0 = %+v, want %q with %d bytes", f.GPUs[0], tt.name, tt.memBytes)
			}
		})
	}
}

func TestFixtureBad(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string
	}{
		{"unknown field", `{"driver_version": "580.95.05", "cuda_driver_version": 13000, "gpus": [], "gpu_count": 8}`, `unknown field "gpu_count"`},
		{"unknown GPU field", `{"driver_version": "580.95.05", "gpus": [{"index": 0, "compute_capability": "12.0", "mem": 1}]}`, `unknown field "mem"`},
		{"bad JSON", `{"driver_version": "580.95.05",`, "unexpected EOF"},
		{"wrong type", `{"driver_version": 580}`, "cannot unmarshal number"},
		{"trailing data", `{"driver_version": "580.95.05", "gpus": []} {}`, "data after the JSON object"},
		{"unknown error", `{"error": "gpu_on_fire"}`, `unknown error "gpu_on_fire"`},
		{"no driver", `{"gpus": []}`, "driver_version is missing"},
		{"bad compute capability", `{"driver_version": "580.95.05", "gpus": [{"index": 0, "compute_capability": "sm_120"}]}`, `gpus[0]: compute_capability "sm_120" is not MAJOR.MINOR`},
		{"repeated index", `{"driver_version": "580.95.05", "gpus": [{"index": 0, "compute_capability": "9.0"}, {"index": 0, "compute_capability": "9.0"}]}`, "gpus[1]: index 0 is negative or repeated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "host.json")
			writeFile(t, path, tt.content)
			f, err := LoadFixture(path)
			if err == nil {
				t.Fatalf("LoadFixture = %+v, want an error", f)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to name %s and contain %q", err, path, tt.want)
			}
		})
	}
}

func TestFixtureMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.json")
	_, err := LoadFixture(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("error = %v, want it to name %s", err, path)
	}
}

// A FIFO named as the fixture is refused at once: `detect` waited for a writer, deaf to
// SIGTERM, until the 2-minute fallback ended the process.
func TestFixtureFIFORefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fixture.json")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadFixture(path); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), path+" is a FIFO, not a regular file") {
			t.Fatalf("error = %v, want the FIFO named", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LoadFixture waited on a FIFO")
	}
}

func TestFixtureDetectOutputRoundTrips(t *testing.T) {
	// `detect --json` prints Facts with their source; that output is a fixture too.
	path := filepath.Join(t.TempDir(), "saved.json")
	writeFile(t, path, `{"driver_version": "580.95.05", "cuda_driver_version": 13000, "nvml_version": "13.580.95.05",
		"gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
		"compute_capability": "9.0", "memory_total_bytes": 150754820096, "pci_bus_id": "00000000:19:00.0"}], "source": "nvml"}`)
	f, err := LoadFixture(path)
	if err != nil {
		t.Fatalf("LoadFixture: %v", err)
	}
	if f.Source != "fixture:"+path || f.GPUs[0].PCIBusID != "00000000:19:00.0" {
		t.Errorf("facts = %+v", f)
	}
}

// stubDetector stands in for NVML.
type stubDetector struct {
	facts *Facts
	calls int
}

func (s *stubDetector) Detect(context.Context) (*Facts, error) {
	s.calls++
	return s.facts, nil
}

func TestDetectWith(t *testing.T) {
	stub := &stubDetector{facts: &Facts{DriverVersion: "1.2.3", Source: "nvml"}}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	f, err := DetectWith(context.Background(), getenv, stub)
	if err != nil || f.Source != "nvml" || stub.calls != 1 {
		t.Fatalf("without a fixture: %+v, %v, %d detector calls; want the detector's facts", f, err, stub.calls)
	}

	env[FixtureEnv] = fixture("h200-x1.json")
	f, err = DetectWith(context.Background(), getenv, stub)
	if err != nil || f.Source != "fixture:"+fixture("h200-x1.json") || stub.calls != 1 {
		t.Fatalf("with a fixture: %+v, %v, %d detector calls; want the fixture's facts", f, err, stub.calls)
	}

	env[FixtureEnv] = fixture("nolib.json")
	if _, err := Detect(context.Background(), getenv); !errors.Is(err, ErrNoLibrary) {
		t.Fatalf("Detect with nolib.json: %v, want ErrNoLibrary", err)
	}
}
