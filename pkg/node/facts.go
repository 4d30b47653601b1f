package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"charm.land/log/v2"
	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/refusal"
)

// DetectFacts reads the host's GPU facts with detect and maps NVML's failures to the exit-code
// contract: a driver/library mismatch is exit 6, no NVML library exit 4, a bad
// SGLPROV_GPU_FIXTURE file exit 2. A host where NVML works but finds no GPU returns its
// facts (zero GPUs) without error.
func DetectFacts(ctx context.Context, detect func(context.Context) (*gpu.Facts, error), getenv func(string) string) (*gpu.Facts, error) {
	facts, err := detect(ctx)
	switch {
	case err == nil, errors.Is(err, gpu.ErrNoGPU):
		return facts, nil
	case errors.Is(err, gpu.ErrDriverMismatch):
		// The mismatch's own message ends in "reboot required": say it once.
		return nil, &exitcode.Error{Msg: err.Error(), Kind: exitcode.ErrReboot}
	case errors.Is(err, gpu.ErrNoLibrary):
		return nil, &exitcode.Error{Msg: noNVML, Kind: exitcode.ErrHost}
	case getenv(gpu.FixtureEnv) != "":
		return nil, &exitcode.Error{Msg: fmt.Sprintf("%v (%s names the file)", err, gpu.FixtureEnv), Kind: exitcode.ErrUsage}
	}
	return nil, fmt.Errorf("detecting GPUs: %w", err)
}

// noNVML is what sglprov says when the NVML library cannot be loaded.
const noNVML = `NVML (libnvidia-ml.so.1) could not be loaded.
  Check the NVIDIA driver: nvidia-smi should list the GPUs; ldconfig -p | grep libnvidia-ml
  should find the library; lsmod | grep nvidia should show the kernel module.
  On a host without a GPU, SGLPROV_GPU_FIXTURE=FILE describes one (see testdata/gpu/).`

// HostFacts detects the GPUs (detect) when the recipe needs them (reg says whether its
// step kinds do) and checks the GPU requirements;
// it returns the ways the host falls short (exit 4 once the commands are checked too). A
// recipe that needs the facts only for a step kind that always uses them (a build step's
// arch list) goes on without them on a host without NVML: that step says what is missing
// when it runs.
func HostFacts(ctx context.Context, r *recipe.Recipe, reg engine.Registry, detect func(context.Context) (*gpu.Facts, error)) (*gpu.Facts, []refusal.Reason, error) {
	if !reg.NeedsFacts(r) {
		return nil, nil, nil
	}
	facts, err := detect(ctx)
	if err != nil && !r.NeedsFacts() && errors.Is(err, exitcode.ErrHost) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	// A recipe given some GPUs sees those only: its counts, memory, --tp and the
	// server's CUDA_VISIBLE_DEVICES follow.
	sub, err := facts.Subset(r.Requires.GPU.Devices)
	if err != nil {
		return nil, []refusal.Reason{{Code: refusal.GPUDevices, Message: err.Error(), Fields: map[string]any{"devices": r.Requires.GPU.Devices}}}, nil
	}
	return sub, gpu.CheckReasons(r.Requires, sub), nil
}

// HostProblems is the exit-4 error listing every way the host falls short, each on its
// own line, carrying the reasons (refusal.Collect).
func HostProblems(problems []refusal.Reason) error {
	return &refusal.Error{Reasons: problems}
}

// Cache returns the fleet cache the recipe's cache block names (nil when it has none);
// newCache makes the client (cache.New); unfinished uploads are kept in the state dir's
// cache-uploads.
func Cache(r *recipe.Recipe, facts *gpu.Facts, stateDir string, logger *log.Logger, newCache func(cache.Config, cache.Options) (*cache.Registry, error)) (cache.Cache, error) {
	if r.Cache == nil {
		return nil, nil
	}
	var fd map[string]any
	if facts != nil {
		fd = facts.TemplateData()
	}
	data, err := r.NewData(fd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	cfg, ok, err := r.CacheConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	if !ok {
		return nil, nil
	}
	c, err := newCache(cache.Config{Repository: cfg.OCI, Push: cfg.Push, PlainHTTP: cfg.PlainHTTP, Digests: cfg.Digests, MinRate: cfg.MinRate},
		cache.Options{UploadDir: filepath.Join(stateDir, "cache-uploads"),
			Logf: func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) }})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	return c, nil
}

// LoadRecipe checks the recipe file's permissions (unless insecure) and parses it with its
// --set values through load; its errors are usage errors (exit 2), every problem of the
// recipe listed.
func LoadRecipe(path string, sets []string, insecure bool, load func(path string, sets []string) (*recipe.Recipe, error)) (*recipe.Recipe, error) {
	if !insecure {
		if err := engine.CheckPermissions(path); err != nil {
			if errors.Is(err, exitcode.ErrUsage) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: reading recipe: %v", exitcode.ErrUsage, err)
		}
	}
	r, err := load(path, sets)
	if err != nil {
		var ps recipe.Problems
		if errors.As(err, &ps) {
			problems := "1 problem"
			if len(ps) != 1 {
				problems = fmt.Sprintf("%d problems", len(ps))
			}
			return nil, fmt.Errorf("%w: %s in the recipe:\n%v", exitcode.ErrUsage, problems, ps)
		}
		return nil, fmt.Errorf("%w: %v", exitcode.ErrUsage, err)
	}
	return r, nil
}
