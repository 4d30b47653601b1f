// Package build is the build step kind: it runs a command (argv, never a shell string) in
// a source directory with a set environment, for example sgl-kernel's wheel build with
// TORCH_CUDA_ARCH_LIST=12.0a, and skips it on a re-run while the source tree, the command,
// the environment, the toolchain and the outputs are what they were.
//
// Defaults the step puts in the build's environment unless the recipe's env sets them:
//
//	TORCH_CUDA_ARCH_LIST        the host's arch list from the GPU facts ("12.0a", "9.0a")
//	MAX_JOBS                    min(cores, floor(available memory / mem_per_job_gib)), >= 1
//	CMAKE_BUILD_PARALLEL_LEVEL  the same number
//	SGL_KERNEL_COMPILE_THREADS  1 (nvcc --threads; the jobs already fill the cores)
//	CCACHE_DIR                  STATE_DIR/ccache, when ccache is on PATH
//	CMAKE_{C,CXX,CUDA}_COMPILER_LAUNCHER  ccache, when ccache is on PATH
//
// The rest of the environment is the process's own (PATH included); the defaults replace
// the process's values (a CUDA image's TORCH_CUDA_ARCH_LIST, say), the recipe's env
// replaces both.
//
// sgl-kernel's CMakeLists.txt reads SGL_KERNEL_COMPILE_THREADS as a CMake cache variable
// (default 32), not from the environment, so a recipe that builds it passes the thread
// count as a define too: -Ccmake.define.SGL_KERNEL_COMPILE_THREADS=1. It also turns ccache
// on by itself when CCACHE_DIR is set; ccache 4.7.5 runs the doubled "ccache ccache nvcc"
// this gives (ccache 4.0 refused it).
package build

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// DefaultMemPerJobGiB is the memory budget of one parallel compile job when the recipe sets
// none: nvcc compiling a CUTLASS kernel takes several GiB, and a host runs out of memory
// long before it runs out of cores.
const DefaultMemPerJobGiB = 4

// Spec is the recipe body of a build step.
type Spec struct {
	// Dir is the directory the command runs in. An absolute path is a host path (under
	// --root where set); a relative one is resolved against the recipe's folder.
	Dir string `yaml:"dir" json:"dir"`
	// Argv is the command and its arguments. argv[0] without a slash is looked up in the
	// build environment's PATH.
	Argv []string `yaml:"argv" json:"argv"`
	// Env sets environment variables for the build; they override the step's defaults.
	Env map[string]string `yaml:"env" json:"env,omitempty"`
	// Outputs are the paths or globs (relative to Dir, or absolute) of the files the build
	// makes, e.g. "dist/*.whl". After a run each must match at least one file.
	Outputs []string `yaml:"outputs" json:"outputs,omitempty"`
	// Inputs are paths or globs (relative to Dir, or absolute) of files outside the source
	// tree whose content decides the result, e.g. "dist/*.whl" for a step that installs
	// the wheel another step built. Their digests are the fingerprint part "inputs".
	Inputs []string `yaml:"inputs" json:"inputs,omitempty"`
	// Exclude are extra globs, relative to Dir, left out of the source tree's digest (build
	// trees the command writes besides its outputs).
	Exclude []string `yaml:"exclude" json:"exclude,omitempty"`
	// Python is the interpreter whose version and torch version are part of the fingerprint
	// (the venv's python for a torch extension).
	Python string `yaml:"python" json:"python,omitempty"`
	// Probes are extra toolchain probes, each an argv whose output is fingerprinted. A probe
	// is named "toolchain." + the base name of its argv[0] ("#2", "#3" added to repeats);
	// one named like a default probe (toolchain.nvcc, toolchain.python, toolchain.torch)
	// replaces it.
	Probes [][]string `yaml:"probes" json:"probes,omitempty"`
	// MemPerJobGiB is the memory budget of one compile job (default 4).
	MemPerJobGiB float64 `yaml:"mem_per_job_gib" json:"mem_per_job_gib,omitempty"`
	// Jobs, when set, is the number of parallel jobs instead of the host-derived one.
	Jobs int `yaml:"jobs" json:"jobs,omitempty"`
	// ArchLibs are paths or globs (relative to Dir, or absolute) of the CUDA extension
	// libraries the build makes or installs; one ending in "/" names every .so under a
	// folder, and "DIR/**/NAME" every file named like NAME under it (the venv's
	// site-packages/sgl_kernel/**/common_ops*.so). After a run, every library must carry
	// SASS or PTX that the host's GPUs run (read from its cubins and PTX, arch-specific
	// sm_XYa and family sm_XYf told apart; libraries of one name in different folders are
	// variants a loader picks from, and one is enough); one that does not fails the step
	// (exit 4), naming the libraries, the architectures they have and the one needed,
	// before any server loads them.
	ArchLibs []string `yaml:"arch_libs" json:"arch_libs,omitempty"`
}

// Kind returns the build step kind for the registry.
func Kind() engine.Kind {
	k := engine.KindOf(func(name string, s Spec) (*Step, error) { return New(name, &s) })
	// The arch list comes from the facts for every recipe with a build step, not only
	// those that mention a GPU; the facts are part of the fingerprint through it.
	k.UsesFacts = true
	// What a build reads of the facts is the arch list (TORCH_CUDA_ARCH_LIST): a driver
	// upgrade that keeps it keeps the generation.
	k.Facts = []string{"gpu.arch_list"}
	return k
}

// Step is a build step ready to be fingerprinted, checked and run.
type Step struct {
	name string
	spec Spec
	host hostInfo
	// statusEvery is how often the one-line status is redrawn on a terminal; logEvery how
	// often a progress line is logged on a pipe.
	statusEvery, logEvery time.Duration
	// verb is what the status line says the step is doing ("building" when empty).
	verb string
	// killGrace is how long a canceled build has between SIGTERM and SIGKILL.
	killGrace time.Duration
	// probeTimeout bounds each toolchain probe.
	probeTimeout time.Duration
	// ccache is the name of the compiler cache looked up on PATH.
	ccache string
	// cache holds the probe outputs of the last fingerprint for the toolchain check.
	cache probeCache
}

// New validates spec and returns the step. Problems are wrapped with exitcode.ErrUsage.
func New(name string, spec *Spec) (*Step, error) {
	if spec == nil {
		return nil, fmt.Errorf("build: no spec: %w", exitcode.ErrUsage)
	}
	s := *spec
	var problems []string
	if strings.TrimSpace(s.Dir) == "" {
		problems = append(problems, "dir is empty")
	}
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		problems = append(problems, "argv is empty")
	}
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			problems = append(problems, fmt.Sprintf("env name %q is not valid", k))
		}
	}
	for _, g := range append(append(append(append([]string(nil), s.Outputs...), s.Exclude...), s.Inputs...), s.ArchLibs...) {
		if g == "" {
			problems = append(problems, "an outputs, inputs, exclude or arch_libs entry is empty")
			continue
		}
		if _, err := filepath.Match(g, ""); err != nil {
			problems = append(problems, fmt.Sprintf("glob %q: %v", g, err))
		}
	}
	for i, p := range s.Probes {
		if len(p) == 0 || p[0] == "" {
			problems = append(problems, fmt.Sprintf("probes[%d] is empty", i))
		}
	}
	if s.MemPerJobGiB < 0 {
		problems = append(problems, "mem_per_job_gib is negative")
	}
	if s.MemPerJobGiB == 0 {
		s.MemPerJobGiB = DefaultMemPerJobGiB
	}
	if s.Jobs < 0 {
		problems = append(problems, "jobs is negative")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("build: %s: %w", strings.Join(problems, "; "), exitcode.ErrUsage)
	}
	return &Step{
		name:         name,
		spec:         s,
		host:         realHost(),
		statusEvery:  time.Second,
		logEvery:     30 * time.Second,
		killGrace:    10 * time.Second,
		probeTimeout: 2 * time.Minute,
		ccache:       "ccache",
	}, nil
}

// dir returns the build directory as an absolute path on this machine.
func (s *Step) dir(env *engine.Env) string { return env.Path(s.spec.Dir) }

// OfflineSkip is why the build does not run under --root ("" when it does). Its folder is
// under the root, but its program runs on this host: a build whose argv, env, python,
// outputs or inputs name an absolute path (a virtual environment's python, a generation's
// folder, a toolkit) would read or write the node's paths on this host, outside the root,
// so it is skipped; one that names none (a script in its own folder, found on PATH) runs
// inside its folder under the root.
func (s *Step) OfflineSkip() string {
	var vals []string
	vals = append(vals, s.spec.Argv...)
	keys := make([]string, 0, len(s.spec.Env))
	for k := range s.spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vals = append(vals, s.spec.Env[k])
	}
	vals = append(vals, s.spec.Python)
	vals = append(vals, s.spec.Outputs...)
	vals = append(vals, s.spec.Inputs...)
	for _, v := range vals {
		if p := hostPathIn(v); p != "" {
			return "offline (--root): the build names " + p + ", a path of the node that is not under the root here; not run"
		}
	}
	return ""
}

// hostPathIn returns the first absolute path in v ("" when none): v is split at white
// space, ':', '=' and ',' (a PATH, a -DKEY=/path define, a list).
func hostPathIn(v string) string {
	for _, f := range strings.FieldsFunc(v, func(r rune) bool {
		return r == ':' || r == '=' || r == ',' || r == ' ' || r == '\t' || r == '\n'
	}) {
		if strings.HasPrefix(f, "/") {
			return f
		}
	}
	return ""
}
