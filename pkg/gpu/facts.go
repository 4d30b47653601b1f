// Package gpu reports facts about the host's NVIDIA GPUs: through NVML, through a JSON
// fixture named by SGLPROV_GPU_FIXTURE, and checks them against a recipe's requirements.
package gpu

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
}

// Device is one GPU.
type Device struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	UUID              string `json:"uuid"`
	ComputeCapability string `json:"compute_capability"`
	MemoryTotalBytes  uint64 `json:"memory_total_bytes"`
	PCIBusID          string `json:"pci_bus_id,omitempty"`
}
