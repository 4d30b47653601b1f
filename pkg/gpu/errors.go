package gpu

import (
	"errors"
	"fmt"
)

// ErrNoLibrary is returned when libnvidia-ml.so cannot be loaded. Its message is the one
// an operator sees; it is returned unwrapped.
var ErrNoLibrary = errors.New("NVML library not found: is the NVIDIA driver installed?")

// ErrDriverMismatch marks NVML's driver/library version mismatch: the user-space driver was
// upgraded while the old kernel module is still loaded. Only a reboot (or a module reload)
// fixes it. The error returned is a *MismatchError that errors.Is this.
var ErrDriverMismatch = errors.New("NVIDIA driver/library version mismatch")

// ErrNoGPU marks a host whose NVML works but reports no GPU. Detect returns it together
// with valid Facts (zero GPUs, driver and CUDA versions): for `detect` that is an answer,
// for a recipe that needs a GPU it is a requirement not met.
var ErrNoGPU = errors.New("NVML reports no GPU")

// MismatchError is the driver/library version mismatch, with both versions when they
// could be read ("" otherwise).
type MismatchError struct {
	// ModuleVersion is the version of the loaded kernel module (/proc/driver/nvidia/version).
	ModuleVersion string
	// LibraryVersion is the version of libnvidia-ml.so (user space).
	LibraryVersion string
}

// Error says what mismatches and that a reboot is required.
func (e *MismatchError) Error() string {
	mod, lib := e.ModuleVersion, e.LibraryVersion
	if mod == "" && lib == "" {
		return ErrDriverMismatch.Error() + ": reboot required"
	}
	if mod == "" {
		mod = "unknown"
	}
	if lib == "" {
		lib = "unknown"
	}
	return fmt.Sprintf("%s: loaded kernel module is %s, NVML library is %s: reboot required", ErrDriverMismatch, mod, lib)
}

// Is makes errors.Is(err, ErrDriverMismatch) true.
func (e *MismatchError) Is(target error) bool {
	return target == ErrDriverMismatch
}
