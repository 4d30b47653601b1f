package gpu

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Runner runs a command and returns what it wrote to stdout and stderr.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs the command as a child process.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// smiQuery is the per-GPU query of SMIDetector; the columns are read in this order.
const smiQuery = "index,name,uuid,compute_cap,memory.total,pci.bus_id,driver_version"

// SMIDetector reads GPU facts from nvidia-smi, for hosts where the process cannot load
// libnvidia-ml.so itself but nvidia-smi works.
type SMIDetector struct {
	// Path is the nvidia-smi command; "nvidia-smi" (looked up in PATH) when empty.
	Path string
	// Run runs it; ExecRunner when nil.
	Run Runner
	// ModuleVersionFile is read for the kernel module's version on a mismatch;
	// DefaultModuleVersionFile when empty.
	ModuleVersionFile string
}

// Detect runs `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` for the GPUs and
// `nvidia-smi -q -d COMPUTE` for the CUDA version. A driver/library mismatch is a
// *MismatchError as with NVML; zero GPUs returns the facts with ErrNoGPU.
func (d *SMIDetector) Detect(ctx context.Context) (*Facts, error) {
	path, run := d.Path, d.Run
	if path == "" {
		path = "nvidia-smi"
	}
	if run == nil {
		run = ExecRunner
	}
	out, err := run(ctx, path, "--query-gpu="+smiQuery, "--format=csv,noheader,nounits")
	if err != nil {
		return nil, d.smiError(out, err)
	}
	f, err := parseSMIQuery(out)
	if err != nil {
		return nil, err
	}
	// The CUDA version is only in the report; without it the facts are still useful.
	if out, err := run(ctx, path, "-q", "-d", "COMPUTE"); err == nil {
		f.CUDADriverVersion = parseSMICUDA(out)
		if f.DriverVersion == "" {
			f.DriverVersion = parseSMIField(out, "Driver Version")
		}
	}
	if len(f.GPUs) == 0 {
		return f, ErrNoGPU
	}
	return f, nil
}

// smiError turns a failed nvidia-smi run into the error NVML would have given.
func (d *SMIDetector) smiError(out []byte, err error) error {
	text := strings.TrimSpace(string(out))
	switch {
	case strings.Contains(text, "Driver/library version mismatch"):
		mod := (&NVMLDetector{ModuleVersionFile: d.ModuleVersionFile}).moduleVersion()
		return &MismatchError{ModuleVersion: mod, LibraryVersion: smiMismatchVersion(text)}
	case strings.Contains(text, "couldn't find libnvidia-ml.so"):
		return ErrNoLibrary
	case text != "":
		return fmt.Errorf("running nvidia-smi: %w: %s", err, firstLine(text))
	}
	return fmt.Errorf("running nvidia-smi: %w", err)
}

var smiMismatchRE = regexp.MustCompile(`NVML library version: (\d+(?:\.\d+)+)`)

// smiMismatchVersion finds the library version some nvidia-smi versions print after a
// mismatch ("NVML library version: 590.44").
func smiMismatchVersion(text string) string {
	if m := smiMismatchRE.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// parseSMIQuery reads the CSV rows of the per-GPU query.
func parseSMIQuery(out []byte) (*Facts, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = strings.Count(smiQuery, ",") + 1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading nvidia-smi output: %w", err)
	}
	f := &Facts{Source: "nvidia-smi", GPUs: []Device{}}
	for _, row := range rows {
		for i := range row {
			row[i] = strings.TrimSpace(row[i])
		}
		idx, err := strconv.Atoi(row[0])
		if err != nil {
			return nil, fmt.Errorf("reading nvidia-smi output: GPU index %q: %w", row[0], err)
		}
		if !ccPattern.MatchString(row[3]) {
			return nil, fmt.Errorf("reading nvidia-smi output: GPU %d: compute capability %q", idx, row[3])
		}
		dev := Device{Index: idx, Name: row[1], UUID: row[2], ComputeCapability: row[3], PCIBusID: row[5]}
		if mib, err := strconv.ParseUint(row[4], 10, 64); err == nil {
			dev.MemoryTotalBytes = mib << 20
		} else if !isNA(row[4]) {
			return nil, fmt.Errorf("reading nvidia-smi output: GPU %d: memory %q: %w", idx, row[4], err)
		}
		f.GPUs = append(f.GPUs, dev)
		if f.DriverVersion == "" {
			f.DriverVersion = row[6]
		}
	}
	return f, nil
}

// isNA reports whether nvidia-smi says a value is not available.
func isNA(s string) bool {
	return strings.HasPrefix(s, "[N/A]") || strings.HasPrefix(s, "[Not Supported]") || s == "N/A"
}

// parseSMIField returns the value of a "Key : value" line of `nvidia-smi -q`.
func parseSMIField(out []byte, key string) string {
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// parseSMICUDA returns the CUDA version of `nvidia-smi -q` in NVML's encoding (13.0 is
// 13000), 0 when absent.
func parseSMICUDA(out []byte) int {
	major, minor, ok := strings.Cut(parseSMIField(out, "CUDA Version"), ".")
	if !ok {
		return 0
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return 0
	}
	return ma*1000 + mi*10
}

// fallbackDetector asks nvidia-smi when the process cannot load NVML.
type fallbackDetector struct {
	primary, fallback Detector
}

// NewFallbackDetector returns a detector that asks primary and, only when primary cannot
// load the NVML library (ErrNoLibrary), fallback. If fallback fails too, the result is
// ErrNoLibrary, unless fallback found a driver/library mismatch.
func NewFallbackDetector(primary, fallback Detector) Detector {
	return &fallbackDetector{primary: primary, fallback: fallback}
}

// Detect implements Detector.
func (d *fallbackDetector) Detect(ctx context.Context) (*Facts, error) {
	f, err := d.primary.Detect(ctx)
	if !errors.Is(err, ErrNoLibrary) {
		return f, err
	}
	f, ferr := d.fallback.Detect(ctx)
	if ferr == nil || errors.Is(ferr, ErrNoGPU) || errors.Is(ferr, ErrDriverMismatch) {
		return f, ferr
	}
	return nil, err
}
