package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// h200SMI is what nvidia-smi printed on an H200 host for the query of SMIDetector.
const h200SMI = "0, NVIDIA H200, GPU-6a505f7a-d0fe-0e7f-223b-79ecdacc3c02, 9.0, 143771, 00000000:00:06.0, 580.159.04\n"

const smiReport = `
==============NVSMI LOG==============

Timestamp                                              : Mon Nov 30 03:48:54 2026
Driver Version                                         : 580.159.04
CUDA Version                                           : 13.0

Attached GPUs                                          : 1
GPU 00000000:00:06.0
    Compute Mode                                       : Default
`

// fakeRunner answers nvidia-smi's two invocations and records them.
type fakeRunner struct {
	query, report string
	queryErr      error
	reportErr     error
	calls         []string
}

func (r *fakeRunner) run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.calls = append(r.calls, name+" "+strings.Join(args, " "))
	if args[0] == "-q" {
		return []byte(r.report), r.reportErr
	}
	return []byte(r.query), r.queryErr
}

func TestSMIDetector(t *testing.T) {
	modFile := filepath.Join(t.TempDir(), "version")
	writeFile(t, modFile, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
	exit := errors.New("exit status 18")
	tests := []struct {
		name    string
		runner  fakeRunner
		want    *Facts
		wantErr string
		wantIs  error
	}{
		{
			name:   "H200",
			runner: fakeRunner{query: h200SMI, report: smiReport},
			want: &Facts{DriverVersion: "580.159.04", CUDADriverVersion: 13000, Source: "nvidia-smi", GPUs: []Device{{
				Index: 0, Name: "NVIDIA H200", UUID: "GPU-6a505f7a-d0fe-0e7f-223b-79ecdacc3c02",
				ComputeCapability: "9.0", MemoryTotalBytes: 150754820096, PCIBusID: "00000000:00:06.0",
			}}},
		},
		{
			name: "two GPUs, memory not reported, report fails",
			runner: fakeRunner{
				query:     "0, NVIDIA GB10, GPU-0a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e, 12.1, [N/A], 0000000F:01:00.0, 580.95.05\n1, NVIDIA GB10, GPU-1a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e, 12.1, [N/A], 0000000F:02:00.0, 580.95.05\n",
				reportErr: exit,
			},
			want: &Facts{DriverVersion: "580.95.05", Source: "nvidia-smi", GPUs: []Device{
				{Index: 0, Name: "NVIDIA GB10", UUID: "GPU-0a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e", ComputeCapability: "12.1", PCIBusID: "0000000F:01:00.0"},
				{Index: 1, Name: "NVIDIA GB10", UUID: "GPU-1a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e", ComputeCapability: "12.1", PCIBusID: "0000000F:02:00.0"},
			}},
		},
		{
			name:   "no GPU",
			runner: fakeRunner{query: "", report: smiReport},
			want:   &Facts{DriverVersion: "580.159.04", CUDADriverVersion: 13000, Source: "nvidia-smi", GPUs: []Device{}},
			wantIs: ErrNoGPU,
		},
		{
			name:    "mismatch",
			runner:  fakeRunner{query: "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.44\n", queryErr: exit},
			wantIs:  ErrDriverMismatch,
			wantErr: "NVIDIA driver/library version mismatch: loaded kernel module is 580.95.05, NVML library is 590.44: reboot required",
		},
		{
			name:    "no library",
			runner:  fakeRunner{query: "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display Driver is properly installed and present in your system.\n", queryErr: exit},
			wantIs:  ErrNoLibrary,
			wantErr: "NVML library not found: is the NVIDIA driver installed?",
		},
		{
			name:    "no driver",
			runner:  fakeRunner{query: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n", queryErr: exit},
			wantErr: "running nvidia-smi: exit status 18: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
		},
		{
			name:    "old nvidia-smi",
			runner:  fakeRunner{query: "Field \"compute_cap\" is not a valid field to query.\n", queryErr: exit},
			wantErr: `running nvidia-smi: exit status 18: Field "compute_cap" is not a valid field to query.`,
		},
		{
			name:    "short row",
			runner:  fakeRunner{query: "0, NVIDIA H200, GPU-6a505f7a-d0fe-0e7f-223b-79ecdacc3c02\n"},
			wantErr: "reading nvidia-smi output: record on line 1: wrong number of fields",
		},
		{
			name:    "bad memory",
			runner:  fakeRunner{query: "0, NVIDIA H200, GPU-6a505f7a-d0fe-0e7f-223b-79ecdacc3c02, 9.0, lots, 00000000:00:06.0, 580.159.04\n"},
			wantErr: `reading nvidia-smi output: GPU 0: memory "lots"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &SMIDetector{Run: tt.runner.run, ModuleVersionFile: modFile}
			f, err := d.Detect(context.Background())
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error = %v, want %v", err, tt.wantIs)
			}
			if tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)) {
				t.Errorf("error = %v, want it to start with %q", err, tt.wantErr)
			}
			if tt.wantIs == nil && tt.wantErr == "" && err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if diff := cmp.Diff(tt.want, f); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
			if len(tt.runner.calls) == 0 || !strings.HasPrefix(tt.runner.calls[0], "nvidia-smi --query-gpu="+smiQuery+" --format=csv,noheader,nounits") {
				t.Errorf("calls = %q", tt.runner.calls)
			}
		})
	}
}

// TestSMIDetectorExec runs a stand-in nvidia-smi as a real child process.
func TestSMIDetectorExec(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "nvidia-smi")
	writeFile(t, script, fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = -q ]; then cat <<'E'\n%sE\nelse printf '%%s' '%s'; fi\n", smiReport, h200SMI))
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := (&SMIDetector{Path: script}).Detect(context.Background())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if f.Count() != 1 || f.GPUs[0].MemoryTotalBytes != 150754820096 || f.CUDAVersion() != "13.0" || f.DriverVersion != "580.159.04" {
		t.Errorf("facts = %+v", f)
	}
	if _, err := (&SMIDetector{Path: filepath.Join(dir, "absent")}).Detect(context.Background()); err == nil {
		t.Errorf("a missing nvidia-smi must fail")
	}
}

// seqDetector returns a fixed answer and counts its calls.
type seqDetector struct {
	facts *Facts
	err   error
	calls int
}

func (s *seqDetector) Detect(context.Context) (*Facts, error) {
	s.calls++
	return s.facts, s.err
}

func TestFallbackDetector(t *testing.T) {
	smiFacts := &Facts{DriverVersion: "580.159.04", Source: "nvidia-smi", GPUs: []Device{{Index: 0}}}
	nvmlFacts := &Facts{DriverVersion: "580.159.04", Source: "nvml", GPUs: []Device{{Index: 0}}}
	mismatch := &MismatchError{ModuleVersion: "580.95.05"}
	tests := []struct {
		name          string
		primary       seqDetector
		fallback      seqDetector
		want          *Facts
		wantErr       error
		fallbackCalls int
	}{
		{"NVML works", seqDetector{facts: nvmlFacts}, seqDetector{facts: smiFacts}, nvmlFacts, nil, 0},
		{"NVML mismatch is final", seqDetector{err: mismatch}, seqDetector{facts: smiFacts}, nil, ErrDriverMismatch, 0},
		{"no library, nvidia-smi works", seqDetector{err: ErrNoLibrary}, seqDetector{facts: smiFacts}, smiFacts, nil, 1},
		{"no library, nvidia-smi absent", seqDetector{err: ErrNoLibrary}, seqDetector{err: errors.New(`exec: "nvidia-smi": executable file not found in $PATH`)}, nil, ErrNoLibrary, 1},
		{"no library, nvidia-smi mismatch", seqDetector{err: ErrNoLibrary}, seqDetector{err: mismatch}, nil, ErrDriverMismatch, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewFallbackDetector(&tt.primary, &tt.fallback).Detect(context.Background())
			if f != tt.want || (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("Detect = %+v, %v; want %+v, %v", f, err, tt.want, tt.wantErr)
			}
			if tt.fallback.calls != tt.fallbackCalls {
				t.Errorf("fallback called %d times, want %d", tt.fallback.calls, tt.fallbackCalls)
			}
		})
	}
}
