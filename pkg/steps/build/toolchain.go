package build

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

// torchProbe prints torch's version and the CUDA version it was built for.
const torchProbe = "import torch; print(torch.__version__, torch.version.cuda)"

// probeCache keeps the outputs of the toolchain probes the fingerprint just ran, so that
// the agreement check before the build does not import torch a second time.
type probeCache struct {
	mu  sync.Mutex
	out map[string]string
}

func (c *probeCache) put(argv []string, out string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		c.out = map[string]string{}
	}
	c.out[strings.Join(argv, "\x00")] = out
}

// take returns and forgets the cached output of argv.
func (c *probeCache) take(argv []string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := strings.Join(argv, "\x00")
	out, ok := c.out[k]
	delete(c.out, k)
	return out, ok
}

// ToolchainError is a build refused before it compiled: torch in the build's Python is
// missing, or was built for another CUDA major version than the nvcc on the build's PATH.
type ToolchainError struct {
	// Python is the interpreter; Torch torch's version and TorchCUDA the CUDA it was built
	// for ("" when torch is missing, "None" for a CPU-only torch).
	Python, Torch, TorchCUDA string
	// NVCC is nvcc's path and NVCCVersion its version.
	NVCC, NVCCVersion string
	// Missing is set when torch cannot be imported; Reason then says why.
	Missing bool
	Reason  string
}

// Error names both versions and the two ways out.
func (e *ToolchainError) Error() string {
	major := hostcmd.Major(e.NVCCVersion)
	wheel := "https://download.pytorch.org/whl/cu" + strings.ReplaceAll(majorMinor(e.NVCCVersion), ".", "")
	if e.Missing {
		return fmt.Sprintf("toolchain check: %s cannot import torch (%s), and this build compiles against it: install torch built for CUDA %s, the nvcc at %s (%s): %s -m pip install torch --index-url %s",
			e.Python, e.Reason, major, e.NVCC, e.NVCCVersion, e.Python, wheel)
	}
	if e.TorchCUDA == "None" || e.TorchCUDA == "" {
		return fmt.Sprintf("toolchain check: torch %s in %s is built without CUDA, and nvcc at %s is CUDA %s: install torch built for CUDA %s: %s -m pip install torch --index-url %s",
			e.Torch, e.Python, e.NVCC, e.NVCCVersion, major, e.Python, wheel)
	}
	toolkit := "cuda-toolkit-" + strings.ReplaceAll(majorMinor(e.TorchCUDA), ".", "-")
	return fmt.Sprintf("toolchain check: torch %s in %s is built for CUDA %s, but nvcc at %s is CUDA %s: the extension would not load into that torch. "+
		"Either install torch built for CUDA %s (%s -m pip install torch --index-url %s), or install the CUDA %s toolkit torch was built for (apt-get install %s, then put /usr/local/cuda-%s/bin first on the PATH)",
		e.Torch, e.Python, e.TorchCUDA, e.NVCC, e.NVCCVersion,
		major, e.Python, wheel, majorMinor(e.TorchCUDA), toolkit, majorMinor(e.TorchCUDA))
}

func majorMinor(v string) string {
	parts := strings.SplitN(strings.TrimSpace(v), ".", 3)
	if len(parts) >= 2 {
		return parts[0] + "." + parts[1]
	}
	return v
}

// findNVCC returns the nvcc a build with envList compiles with and the argv that reads its
// version: the one on the build's PATH, else the first under $CUDA_HOME/bin,
// $CUDA_PATH/bin or /usr/local/cuda/bin, where torch and CMake look for it too and where
// NVIDIA's packages put it. ok is false when there is none.
func findNVCC(dir string, envList []string) (path string, argv []string, ok bool) {
	if p, err := stepexec.LookPath("nvcc", dir, envList); err == nil {
		return p, []string{"nvcc", "--version"}, true
	}
	for _, d := range hostcmd.CUDADirs(func(k string) string { return stepexec.Getenv(envList, k) }) {
		if p := filepath.Join(d, "nvcc"); stepexec.IsExecutable(p) == nil {
			return p, []string{p, "--version"}, true
		}
	}
	return "", nil, false
}

// checkToolchain refuses, before anything compiles, a build whose spec names a python
// without torch, or whose torch was built for another CUDA major version than the nvcc on
// the build's PATH. Without nvcc on that PATH there is nothing to compare, and the build
// goes on (it may not compile CUDA at all).
func (s *Step) checkToolchain(ctx context.Context, env *engine.Env, dir string, envList []string) error {
	if s.spec.Python == "" {
		return nil
	}
	nvccPath, nvccArgv, ok := findNVCC(dir, envList)
	if !ok {
		return nil
	}
	nvccOut, ok := s.cache.take(nvccArgv)
	if !ok {
		nvccOut = s.probe(ctx, dir, envList, nvccArgv)
	}
	nvccVersion, err := hostcmd.ParseVersion("nvcc", nvccOut)
	if err != nil {
		if env.Log != nil {
			env.Log.Warn("cannot read nvcc's version; not checking torch against it", "nvcc", nvccPath, "err", err)
		}
		return nil
	}
	torchArgv := []string{s.spec.Python, "-c", torchProbe}
	torchOut, ok := s.cache.take(torchArgv)
	if !ok {
		torchOut = s.probe(ctx, dir, envList, torchArgv)
	}
	e := &ToolchainError{Python: s.spec.Python, NVCC: nvccPath, NVCCVersion: nvccVersion}
	switch {
	case torchOut == "absent":
		e.Missing, e.Reason = true, "the interpreter is not there"
		return e
	case strings.HasPrefix(torchOut, "error: "):
		e.Missing, e.Reason = true, strings.TrimPrefix(torchOut, "error: ")
		return e
	}
	fields := strings.Fields(lastLine(torchOut))
	if len(fields) != 2 {
		e.Missing, e.Reason = true, fmt.Sprintf("unexpected output %q", torchOut)
		return e
	}
	e.Torch, e.TorchCUDA = fields[0], fields[1]
	if e.TorchCUDA == "None" || hostcmd.Major(e.TorchCUDA) != hostcmd.Major(nvccVersion) {
		return e
	}
	if env.Log != nil {
		env.Log.Info("toolchain agrees", "torch", e.Torch, "torch_cuda", e.TorchCUDA, "nvcc", nvccVersion)
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
