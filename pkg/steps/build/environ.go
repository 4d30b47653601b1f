package build

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

const gib = 1 << 30

// Environment variables the step sets by default.
const (
	envArchList      = "TORCH_CUDA_ARCH_LIST"
	envMaxJobs       = "MAX_JOBS"
	envCMakeParallel = "CMAKE_BUILD_PARALLEL_LEVEL"
	envCompileThread = "SGL_KERNEL_COMPILE_THREADS"
	envCCacheDir     = "CCACHE_DIR"
)

// ccacheLaunchers are the CMake compiler launcher variables set to ccache.
var ccacheLaunchers = [...]string{
	"CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER",
}

// notFingerprinted reports whether the environment variable k is left out of the "env"
// fingerprint part. These change how fast a build runs, never what it makes:
//   - MAX_JOBS and CMAKE_BUILD_PARALLEL_LEVEL follow the memory free at the moment, which
//     differs from run to run; were they fingerprinted, a plan on a busy host would rebuild
//     sgl-kernel (an hour) for nothing.
//   - CCACHE_DIR and the compiler launchers: ccache returns what the compiler would have,
//     so installing ccache (or moving --state-dir) must not rebuild either.
//
// A recipe that sets one of them changes its own text, which the engine fingerprints.
func notFingerprinted(k string) bool {
	switch k {
	case envMaxJobs, envCMakeParallel, envCCacheDir:
		return true
	}
	for _, l := range ccacheLaunchers {
		if k == l {
			return true
		}
	}
	return false
}

// hostInfo tells how many cores and how much free memory the host has; tests replace it.
type hostInfo struct {
	cores func() int
	// memAvailable returns the memory available for new work, in bytes.
	memAvailable func() (uint64, error)
}

func realHost() hostInfo {
	return hostInfo{
		cores:        runtime.NumCPU,
		memAvailable: func() (uint64, error) { return readMemAvailable("/proc/meminfo") },
	}
}

// readMemAvailable reads MemAvailable (or, on kernels without it, MemTotal) from a
// /proc/meminfo file, in bytes.
func readMemAvailable(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("reading memory size: %w", err)
	}
	defer f.Close()
	var total uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "MemAvailable:":
			return kb * 1024, nil
		case "MemTotal:":
			total = kb * 1024
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	if total == 0 {
		return 0, fmt.Errorf("reading %s: no MemAvailable or MemTotal line", path)
	}
	return total, nil
}

// JobCount returns how many compile jobs a host with cores cores and memBytes bytes of
// available memory can run at perJobGiB GiB each: min(cores, floor(mem/perJob)), at least 1.
func JobCount(cores int, memBytes uint64, perJobGiB float64) int {
	if perJobGiB <= 0 {
		perJobGiB = DefaultMemPerJobGiB
	}
	byMem := math.Floor(float64(memBytes) / (perJobGiB * gib))
	jobs := cores
	if byMem < float64(jobs) {
		jobs = int(byMem)
	}
	return max(jobs, 1)
}

// jobs returns the number of parallel jobs for this build and a phrase saying how it was
// chosen.
func (s *Step) jobs() (int, string) {
	if s.spec.Jobs > 0 {
		return s.spec.Jobs, "set by the recipe"
	}
	cores := s.host.cores()
	mem, err := s.host.memAvailable()
	if err != nil {
		// Without a memory figure the cores alone would risk the OOM killer; one job is
		// slow but finishes.
		return 1, fmt.Sprintf("%d cores, memory unknown (%v)", cores, err)
	}
	n := JobCount(cores, mem, s.spec.MemPerJobGiB)
	return n, fmt.Sprintf("%d cores, %.1f GiB available, %g GiB per job", cores, float64(mem)/gib, s.spec.MemPerJobGiB)
}

// archList returns the TORCH_CUDA_ARCH_LIST value for the host's GPUs ("" without facts).
func archList(f *gpu.Facts) string {
	if f == nil {
		return ""
	}
	return f.ArchList()
}

// noArchWhy says why the facts give no arch list.
func noArchWhy(env *engine.Env) string {
	if env.Facts == nil {
		return "no GPU facts: NVML is not available and no fixture is set"
	}
	return "NVML lists no GPU"
}

// buildEnv returns the variables the step sets for the build: its defaults overridden by
// the recipe's env. jobs <= 0 leaves the job variables out (as the fingerprint does).
func (s *Step) buildEnv(env *engine.Env, jobs int, ccache bool) map[string]string {
	vars := map[string]string{envCompileThread: "1"}
	if al := archList(env.Facts); al != "" {
		vars[envArchList] = al
	}
	if jobs > 0 {
		vars[envMaxJobs] = strconv.Itoa(jobs)
		vars[envCMakeParallel] = strconv.Itoa(jobs)
	}
	if ccache {
		vars[envCCacheDir] = filepath.Join(env.StateDir, "ccache")
		for _, l := range ccacheLaunchers {
			vars[l] = "ccache"
		}
	}
	for k, v := range s.spec.Env {
		vars[k] = v
	}
	return vars
}

// environ merges vars over the process's environment, sorted.
func environ(vars map[string]string) []string {
	merged := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			merged[k] = v
		}
	}
	for k, v := range vars {
		merged[k] = v
	}
	out := make([]string, 0, len(merged))
	for k, v := range merged {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
