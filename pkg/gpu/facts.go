// Package gpu reports facts about the host's NVIDIA GPUs: through NVML, through a JSON
// fixture named by SGLPROV_GPU_FIXTURE, and checks them against a recipe's requirements.
//
// This is the only package of the project that uses cgo (through go-nvml, which loads
// libnvidia-ml.so at run time, so a binary built here still starts on a host without a driver).
package gpu

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/versions"
)

// Facts is what a host has: its GPUs, driver and CUDA version.
type Facts struct {
	// DriverVersion is the NVIDIA driver version, e.g. "580.95.05".
	DriverVersion string `json:"driver_version"`
	// CUDADriverVersion is the CUDA version the driver supports, as NVML encodes it
	// (13000 means 13.0).
	CUDADriverVersion int `json:"cuda_driver_version"`
	// NVMLVersion is the NVML library version, when known.
	NVMLVersion string `json:"nvml_version,omitempty"`
	// GPUs lists the devices by index.
	GPUs []Device `json:"gpus"`
	// Source says where the facts came from: "nvml" or "fixture:PATH".
	Source string `json:"source,omitempty"`
	// Topology is one Link per pair of GPUs (A < B), when read.
	Topology []Link `json:"topology,omitempty"`
	// Kernel is what the kernel says of the GPUs' IOMMU, PCIe ACS and Xid events, when read.
	Kernel *KernelFacts `json:"kernel,omitempty"`
	// Selected is set when GPUs lists only the devices a recipe was given
	// (requires.gpu.devices), not every GPU of the host.
	Selected bool `json:"selected,omitempty"`
}

// Device is one GPU.
type Device struct {
	// Index is NVML's device index (CUDA_VISIBLE_DEVICES order with the default PCI
	// ordering).
	Index int `json:"index"`
	// Name is the product name, e.g. "NVIDIA RTX PRO 6000 Blackwell Server Edition".
	Name string `json:"name"`
	// UUID is "GPU-" and a UUID.
	UUID string `json:"uuid"`
	// ComputeCapability is "major.minor", e.g. "12.0".
	ComputeCapability string `json:"compute_capability"`
	// MemoryTotalBytes is the total memory; 0 when the GPU does not report it.
	MemoryTotalBytes uint64 `json:"memory_total_bytes"`
	// PCIBusID is NVML's bus id, e.g. "00000000:18:00.0", when known.
	PCIBusID string `json:"pci_bus_id,omitempty"`
	// Health is the GPU's link, error counters, modes and processes, when read.
	Health *Health `json:"health,omitempty"`
}

// gib is the number of bytes in one GiB.
const gib = 1 << 30

// MemoryGiB returns the device's total memory in GiB.
func (d Device) MemoryGiB() float64 {
	return float64(d.MemoryTotalBytes) / gib
}

// Label names the device for messages: `GPU 3 (NVIDIA H200)`.
func (d Device) Label() string {
	if d.Name == "" {
		return fmt.Sprintf("GPU %d", d.Index)
	}
	return fmt.Sprintf("GPU %d (%s)", d.Index, d.Name)
}

// archSpecific reports whether a compute capability has an architecture-specific ("a")
// target in nvcc: sm_90a, sm_100a, sm_101a (called sm_110a since CUDA 13), sm_103a,
// sm_110a, sm_120a and sm_121a. Kernels that use their special instructions (wgmma,
// tcgen05, the FP4 block-scaled MMA) must be built for the "a" target.
func archSpecific(cc string) bool {
	switch cc {
	case "9.0", "10.0", "10.1", "10.3", "11.0", "12.0", "12.1":
		return true
	}
	return false
}

// ArchName returns the TORCH_CUDA_ARCH_LIST entry for one compute capability: "12.0a" for
// an architecture with an arch-specific target, the capability itself ("8.9") otherwise.
func ArchName(cc string) string {
	if archSpecific(cc) {
		return cc + "a"
	}
	return cc
}

// ComputeCapabilities returns the distinct compute capabilities of the host's GPUs, lowest
// first.
func (f *Facts) ComputeCapabilities() []string {
	if f == nil {
		return nil
	}
	seen := map[string]bool{}
	var ccs []string
	for _, d := range f.GPUs {
		if d.ComputeCapability == "" || seen[d.ComputeCapability] {
			continue
		}
		seen[d.ComputeCapability] = true
		ccs = append(ccs, d.ComputeCapability)
	}
	sort.Slice(ccs, func(i, j int) bool { return versions.CompareVersions(ccs[i], ccs[j]) < 0 })
	return ccs
}

// ArchList returns the value for TORCH_CUDA_ARCH_LIST that covers every GPU of the host:
// one entry per distinct compute capability, lowest first, joined with ";" ("12.0a" for a
// host of RTX PRO 6000 Blackwell, "8.9;9.0a" for a mixed one). It is "" with no GPUs.
func (f *Facts) ArchList() string {
	ccs := f.ComputeCapabilities()
	names := make([]string, len(ccs))
	for i, cc := range ccs {
		names[i] = ArchName(cc)
	}
	return strings.Join(names, ";")
}

// ComputeCapability returns the compute capability common to the host's GPUs: the lowest
// one when they differ (Requirements.Check names the GPUs that fall short), "" with none.
func (f *Facts) ComputeCapability() string {
	ccs := f.ComputeCapabilities()
	if len(ccs) == 0 {
		return ""
	}
	return ccs[0]
}

// Homogeneous reports whether every GPU has the same name, compute capability and memory.
func (f *Facts) Homogeneous() bool {
	if f == nil {
		return true
	}
	for _, d := range f.GPUs {
		g := f.GPUs[0]
		if d.Name != g.Name || d.ComputeCapability != g.ComputeCapability || d.MemoryTotalBytes != g.MemoryTotalBytes {
			return false
		}
	}
	return true
}

// CUDAVersion returns the CUDA version the driver supports as "major.minor" ("13.0" for
// 13000, "12.8" for 12080), or "" when it is not known.
func (f *Facts) CUDAVersion() string {
	if f == nil || f.CUDADriverVersion <= 0 {
		return ""
	}
	return FormatCUDAVersion(f.CUDADriverVersion)
}

// FormatCUDAVersion turns NVML's encoding of a CUDA version (1000*major + 10*minor) into
// "major.minor".
func FormatCUDAVersion(v int) string {
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}

// MinMemoryGiB returns the total memory of the smallest GPU in GiB, 0 with no GPUs.
func (f *Facts) MinMemoryGiB() float64 {
	if f == nil || len(f.GPUs) == 0 {
		return 0
	}
	m := math.Inf(1)
	for _, d := range f.GPUs {
		m = math.Min(m, d.MemoryGiB())
	}
	return m
}

// Count returns the number of GPUs.
func (f *Facts) Count() int {
	if f == nil {
		return 0
	}
	return len(f.GPUs)
}

// TemplateData returns the facts as recipe templates see them:
//
//	.gpu.count       int     number of GPUs
//	.gpu.cc          string  common compute capability, the lowest when they differ ("12.0")
//	.gpu.arch_list   string  TORCH_CUDA_ARCH_LIST value ("12.0a")
//	.gpu.sgl_kernel_cmake_args  string  sgl-kernel's CMake defines for these GPUs
//	                 ("-DENABLE_BELOW_SM90=OFF ... -DSGL_KERNEL_ENABLE_FP4=ON"; see SGLKernelCMakeArgs)
//	.gpu.memory_gib  int     memory of the smallest GPU, whole GiB rounded down (95)
//	.gpu.name        string  name of GPU 0 ("" with none)
//	.driver.version  string  driver version ("580.95.05")
//	.cuda.version    string  CUDA version the driver supports ("13.0")
func (f *Facts) TemplateData() map[string]any {
	name := ""
	if f.Count() > 0 {
		name = f.GPUs[0].Name
	}
	driver := ""
	if f != nil {
		driver = f.DriverVersion
	}
	return map[string]any{
		"gpu": map[string]any{
			"count":      f.Count(),
			"cc":         f.ComputeCapability(),
			"arch_list":  f.ArchList(),
			"memory_gib": int(math.Floor(f.MinMemoryGiB())),
			"name":       name,
			// sgl-kernel's switches for these GPUs, for scikit-build-core's CMAKE_ARGS.
			"sgl_kernel_cmake_args": f.SGLKernelCMakeArgs(),
		},
		"driver": map[string]any{"version": driver},
		"cuda":   map[string]any{"version": f.CUDAVersion()},
	}
}
