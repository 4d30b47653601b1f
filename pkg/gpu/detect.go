package gpu

import (
	"context"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Detector reads the host's GPU facts.
type Detector interface {
	// Detect returns the facts, or an error (see Detect for the ones with a meaning).
	Detect(ctx context.Context) (*Facts, error)
}

// Detect returns the host's GPU facts: from the fixture file named by SGLPROV_GPU_FIXTURE
// when getenv returns one (getenv nil means os.Getenv), else through NVML (nvml.New()),
// and through nvidia-smi when the process cannot load the NVML library but nvidia-smi
// works (see NewFallbackDetector).
//
// Errors: ErrNoLibrary (returned as is, its message is the one to show), a *MismatchError
// (errors.Is ErrDriverMismatch: a reboot is required), or another error naming what failed.
// A host where NVML works but finds no GPU returns its Facts (zero GPUs) together with
// ErrNoGPU: callers that only report (detect) print the facts; callers that need a GPU
// treat it as an unmet requirement.
func Detect(ctx context.Context, getenv func(string) string) (*Facts, error) {
	return DetectWith(ctx, getenv, NewFallbackDetector(NewNVMLDetector(nvml.New()), &SMIDetector{}))
}

// DetectWith is Detect with the detector used when no fixture is named.
func DetectWith(ctx context.Context, getenv func(string) string, d Detector) (*Facts, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if path := getenv(FixtureEnv); path != "" {
		return LoadFixture(path)
	}
	return d.Detect(ctx)
}
