package gpu

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/sglprov/sglprov/pkg/safefile"
)

// Default places the NVML detector reads when NVML reports a driver/library mismatch.
const (
	// DefaultModuleVersionFile names the loaded kernel module's version.
	DefaultModuleVersionFile = "/proc/driver/nvidia/version"
	// DefaultMapsFile lists the files mapped into this process, libnvidia-ml.so.N.N.N among
	// them once go-nvml has opened it.
	DefaultMapsFile = "/proc/self/maps"
)

// DefaultLibraryGlobs returns where libnvidia-ml.so.N.N.N is looked for when the process
// maps do not name it.
func DefaultLibraryGlobs() []string {
	return []string{
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*",
		"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.*",
		"/usr/lib64/libnvidia-ml.so.*",
		"/usr/local/nvidia/lib64/libnvidia-ml.so.*",
		"/usr/lib/libnvidia-ml.so.*",
		"/lib/x86_64-linux-gnu/libnvidia-ml.so.*",
		"/lib64/libnvidia-ml.so.*",
	}
}

// NVMLDetector reads GPU facts through an NVML library passed in (nvml.New() on a real
// host, go-nvml's mock in tests). It calls Init first, nothing else after a failed Init,
// and Shutdown after a successful one.
type NVMLDetector struct {
	lib nvml.Interface
	// ModuleVersionFile is read for the kernel module's version on a mismatch;
	// DefaultModuleVersionFile when empty.
	ModuleVersionFile string
	// MapsFile is read for the loaded library's file name on a mismatch; DefaultMapsFile
	// when empty.
	MapsFile string
	// LibraryGlobs are searched for the library's file name when MapsFile does not name it;
	// DefaultLibraryGlobs() when nil.
	LibraryGlobs []string
	// Kernel reads the IOMMU, ACS and Xid facts after NVML; nil reads nothing of the kernel.
	// NewNVMLDetector sets the real one.
	Kernel *KernelReader
}

// NewNVMLDetector returns a detector that uses lib.
func NewNVMLDetector(lib nvml.Interface) *NVMLDetector {
	return &NVMLDetector{lib: lib, Kernel: &KernelReader{}}
}

// Detect initializes NVML and reads the host's driver, CUDA and NVML versions and each
// GPU's name, UUID, compute capability, total memory and PCI bus id.
//
// A library that cannot be loaded is ErrNoLibrary; a driver/library mismatch is a
// *MismatchError (errors.Is ErrDriverMismatch); a device call that fails names the device
// index and the call. Zero GPUs returns the facts together with ErrNoGPU.
func (d *NVMLDetector) Detect(ctx context.Context) (*Facts, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ret, err := d.init()
	if err != nil {
		return nil, err
	}
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, ErrNoLibrary
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return nil, &MismatchError{ModuleVersion: d.moduleVersion(), LibraryVersion: d.libraryVersion()}
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("initializing NVML: the NVIDIA kernel module is not loaded (%s)", returnName(ret))
	case nvml.ERROR_NO_PERMISSION:
		return nil, fmt.Errorf("initializing NVML: no permission to open the NVIDIA devices (%s)", returnName(ret))
	default:
		return nil, fmt.Errorf("initializing NVML: %s", returnName(ret))
	}
	defer d.lib.Shutdown() //nolint:errcheck // nothing useful to do about a failed shutdown.

	f := &Facts{Source: "nvml", GPUs: []Device{}}
	var r nvml.Return
	if f.DriverVersion, r = d.lib.SystemGetDriverVersion(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("reading the driver version: nvmlSystemGetDriverVersion: %w", r)
	}
	if f.CUDADriverVersion, r = d.lib.SystemGetCudaDriverVersion(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("reading the CUDA driver version: nvmlSystemGetCudaDriverVersion: %w", r)
	}
	if v, r := d.lib.SystemGetNVMLVersion(); r == nvml.SUCCESS {
		f.NVMLVersion = v
	}
	n, r := d.lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: nvmlDeviceGetCount: %w", r)
	}
	handles := make([]nvml.Device, 0, n)
	buses := make([]string, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dev, h, err := d.device(i)
		if err != nil {
			return nil, err
		}
		f.GPUs = append(f.GPUs, dev)
		handles = append(handles, h)
		buses = append(buses, dev.PCIBusID)
	}
	if n == 0 {
		return f, ErrNoGPU
	}
	f.Topology = topology(handles, buses)
	if d.Kernel != nil {
		f.Kernel = d.Kernel.Read(ctx, f.GPUs)
	}
	return f, nil
}

// init calls Init, turning a panic from the library into an error.
func (d *NVMLDetector) init() (ret nvml.Return, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("initializing NVML: %v", p)
		}
	}()
	return d.lib.Init(), nil
}

// device reads one GPU and returns its handle too.
func (d *NVMLDetector) device(i int) (Device, nvml.Device, error) {
	fail := func(call string, r nvml.Return) error {
		return fmt.Errorf("reading GPU %d: %s: %w", i, call, r)
	}
	h, r := d.lib.DeviceGetHandleByIndex(i)
	if r != nvml.SUCCESS {
		return Device{}, nil, fail("nvmlDeviceGetHandleByIndex", r)
	}
	dev := Device{Index: i}
	if dev.Name, r = h.GetName(); r != nvml.SUCCESS {
		return Device{}, nil, fail("nvmlDeviceGetName", r)
	}
	if dev.UUID, r = h.GetUUID(); r != nvml.SUCCESS {
		return Device{}, nil, fail("nvmlDeviceGetUUID", r)
	}
	major, minor, r := h.GetCudaComputeCapability()
	if r != nvml.SUCCESS {
		return Device{}, nil, fail("nvmlDeviceGetCudaComputeCapability", r)
	}
	dev.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	mem, r := h.GetMemoryInfo()
	switch r {
	case nvml.SUCCESS:
		dev.MemoryTotalBytes = mem.Total
	case nvml.ERROR_NOT_SUPPORTED:
		// GPUs with unified memory (GB10) report none; 0 stands for unknown.
	default:
		return Device{}, nil, fail("nvmlDeviceGetMemoryInfo", r)
	}
	pci, r := h.GetPciInfo()
	if r != nvml.SUCCESS {
		return Device{}, nil, fail("nvmlDeviceGetPciInfo", r)
	}
	dev.PCIBusID = cString(pci.BusId[:])
	dev.Health = health(h)
	return dev, h, nil
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// returnName names an NVML return code without calling into the library (after a failed
// Init nothing else of NVML may be called, nvmlErrorString included).
func returnName(r nvml.Return) string {
	switch r {
	case nvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case nvml.ERROR_OPERATING_SYSTEM:
		return "ERROR_OPERATING_SYSTEM"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH"
	case nvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	}
	return fmt.Sprintf("NVML return code %d", int32(r))
}

// moduleVersion reads the loaded kernel module's version, "" when it cannot.
func (d *NVMLDetector) moduleVersion() string {
	path := d.ModuleVersionFile
	if path == "" {
		path = DefaultModuleVersionFile
	}
	b, err := safefile.ReadPrefix(path, 64<<10)
	if err != nil {
		return ""
	}
	return ParseModuleVersion(b)
}

var dottedVersion = regexp.MustCompile(`^\d+(\.\d+)+$`)

// ParseModuleVersion returns the kernel module's version from the text of
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05
// ..."), "" when it names none.
func ParseModuleVersion(text []byte) string {
	line, _, _ := bytes.Cut(text, []byte("\n"))
	for _, tok := range strings.Fields(string(line)) {
		if dottedVersion.MatchString(tok) {
			return tok
		}
	}
	return ""
}

var libraryFile = regexp.MustCompile(`libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)*)$`)

// libraryVersion finds the version of libnvidia-ml.so from its file name: the one mapped
// into this process first, else the only one found by LibraryGlobs; "" when unknown.
func (d *NVMLDetector) libraryVersion() string {
	maps := d.MapsFile
	if maps == "" {
		maps = DefaultMapsFile
	}
	if fh, err := os.Open(maps); err == nil {
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if m := libraryFile.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil {
				return m[1]
			}
		}
	}
	globs := d.LibraryGlobs
	if globs == nil {
		globs = DefaultLibraryGlobs()
	}
	found := map[string]bool{}
	for _, g := range globs {
		paths, _ := filepath.Glob(g)
		for _, p := range paths {
			if m := libraryFile.FindStringSubmatch(p); m != nil {
				found[m[1]] = true
			}
		}
	}
	if len(found) == 1 {
		for v := range found {
			return v
		}
	}
	return ""
}
