package gpu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// FixtureEnv names the environment variable whose value, a JSON file, replaces NVML.
const FixtureEnv = "SGLPROV_GPU_FIXTURE"

// Fixture error values: the top-level "error" of a fixture makes it fail as NVML does.
const (
	// FixtureErrorMismatch fails like NVML's driver/library version mismatch.
	FixtureErrorMismatch = "driver_library_mismatch"
	// FixtureErrorNoLibrary fails like a host without libnvidia-ml.so.
	FixtureErrorNoLibrary = "library_not_found"
)

// fixtureFile is the JSON form of a fixture: Facts plus how it fails.
type fixtureFile struct {
	DriverVersion     string   `json:"driver_version"`
	CUDADriverVersion int      `json:"cuda_driver_version"`
	NVMLVersion       string   `json:"nvml_version"`
	GPUs              []Device `json:"gpus"`
	// Topology and Kernel are the host-fitness facts (optional).
	Topology []Link       `json:"topology"`
	Kernel   *KernelFacts `json:"kernel"`
	// Source is accepted (so that `detect --json` output is a fixture) and replaced.
	Source string `json:"source"`
	// Error is "", FixtureErrorMismatch or FixtureErrorNoLibrary.
	Error string `json:"error"`
	// LoadedModuleVersion and LibraryVersion are the versions a mismatch reports.
	LoadedModuleVersion string `json:"loaded_module_version"`
	LibraryVersion      string `json:"library_version"`
}

var ccPattern = regexp.MustCompile(`^\d+\.\d+$`)

// LoadFixture reads the GPU facts of a fixture file (the format is in DESIGN.md). Unknown
// fields, bad JSON and bad values are errors that name the file. A fixture with an "error"
// fails with the same error values as NVML (ErrNoLibrary, *MismatchError); one with no GPU
// returns its facts together with ErrNoGPU, as NVML does. GPUs are sorted by index. A
// file that is not a regular file (a FIFO) or is larger than 16 MiB is refused without
// waiting on it.
func LoadFixture(path string) (*Facts, error) {
	b, err := safefile.ReadRegular(path, 16<<20)
	if err != nil {
		return nil, fmt.Errorf("reading GPU fixture: %w", err)
	}
	return parseFixture(path, b)
}

func parseFixture(path string, b []byte) (*Facts, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var ff fixtureFile
	if err := dec.Decode(&ff); err != nil {
		return nil, fmt.Errorf("reading GPU fixture %s: %w", path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading GPU fixture %s: data after the JSON object", path)
	}
	switch ff.Error {
	case "":
	case FixtureErrorNoLibrary:
		return nil, ErrNoLibrary
	case FixtureErrorMismatch:
		return nil, &MismatchError{ModuleVersion: ff.LoadedModuleVersion, LibraryVersion: ff.LibraryVersion}
	default:
		return nil, fmt.Errorf("reading GPU fixture %s: unknown error %q (want %q or %q)",
			path, ff.Error, FixtureErrorMismatch, FixtureErrorNoLibrary)
	}
	if ff.DriverVersion == "" {
		return nil, fmt.Errorf("reading GPU fixture %s: driver_version is missing", path)
	}
	seen := map[int]bool{}
	for i, d := range ff.GPUs {
		if !ccPattern.MatchString(d.ComputeCapability) {
			return nil, fmt.Errorf("reading GPU fixture %s: gpus[%d]: compute_capability %q is not MAJOR.MINOR", path, i, d.ComputeCapability)
		}
		if d.Index < 0 || seen[d.Index] {
			return nil, fmt.Errorf("reading GPU fixture %s: gpus[%d]: index %d is negative or repeated", path, i, d.Index)
		}
		seen[d.Index] = true
	}
	gpus := append([]Device{}, ff.GPUs...)
	sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	f := &Facts{
		DriverVersion:     ff.DriverVersion,
		CUDADriverVersion: ff.CUDADriverVersion,
		NVMLVersion:       ff.NVMLVersion,
		GPUs:              gpus,
		Source:            "fixture:" + path,
		Topology:          ff.Topology,
		Kernel:            ff.Kernel,
	}
	for i, l := range ff.Topology {
		if l.A >= l.B || !seen[l.A] || !seen[l.B] {
			return nil, fmt.Errorf("reading GPU fixture %s: topology[%d]: a %d, b %d must name two GPUs of the fixture, a < b", path, i, l.A, l.B)
		}
	}
	if len(gpus) == 0 {
		return f, ErrNoGPU
	}
	return f, nil
}
