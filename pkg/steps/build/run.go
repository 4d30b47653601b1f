package build

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

// Run runs the build command in its directory, streams its output to the step log and
// its progress to the console, and records the outputs it made.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	dir := s.dir(env)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("checking build dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("build dir %s is not a directory", dir)
	}

	jobs, how := s.jobs()
	if v, ok := s.spec.Env[envMaxJobs]; ok {
		how = "MAX_JOBS=" + v + " in the recipe's env"
	}
	vars := s.buildEnv(env, jobs, false)
	if vars[envArchList] == "" {
		return fmt.Errorf("%w: no GPU found on this host (%s), so there is no arch list to build for: set TORCH_CUDA_ARCH_LIST in the step's env (e.g. \"12.0a\"), or describe the target host with SGLPROV_GPU_FIXTURE=FILE",
			exitcode.ErrHost, noArchWhy(env))
	}
	if _, err := stepexec.LookPath(s.ccache, dir, environ(vars)); err == nil {
		vars = s.buildEnv(env, jobs, true)
		if cd := vars[envCCacheDir]; cd != "" {
			if err := os.MkdirAll(cd, 0o755); err != nil {
				return fmt.Errorf("creating ccache dir: %w", err)
			}
		}
	}
	envList := environ(vars)
	if err := s.checkToolchain(ctx, env, dir, envList); err != nil {
		return err
	}
	path, err := stepexec.LookPath(s.spec.Argv[0], dir, envList)
	if err != nil {
		return fmt.Errorf("finding %s: %w", s.spec.Argv[0], err)
	}
	if env.Log != nil {
		shown := dir // the node's path, as the recipe names it, also under --root
		if filepath.IsAbs(s.spec.Dir) {
			shown = s.spec.Dir
		}
		kv := []any{"dir", shown, "argv", strings.Join(s.spec.Argv, " "), "jobs", jobs, "jobs_from", how}
		if al := vars[envArchList]; al != "" {
			kv = append(kv, "arch_list", al)
		}
		env.Log.Info("building", append(kv, "ccache", vars[envCCacheDir] != "")...)
	}
	env.Detail("jobs", jobs)
	if al := vars[envArchList]; al != "" {
		env.Detail("arch_list", al)
	}

	if err := s.execute(ctx, env, path, dir, envList); err != nil {
		return err
	}
	rec, err := s.recordOutputs(env)
	if err != nil {
		return err
	}
	if err := env.SaveData(rec); err != nil {
		return fmt.Errorf("recording outputs: %w", err)
	}
	if len(rec.Outputs) > 0 {
		paths := make([]string, len(rec.Outputs))
		for i, o := range rec.Outputs {
			paths[i] = o.Path
		}
		env.Detail("outputs", paths)
	}
	return s.checkArchLibs(env)
}

// execute runs the build command through stepexec: its own process group, output to the
// step log, progress to the console, the group killed when ctx ends.
func (s *Step) execute(ctx context.Context, env *engine.Env, path, dir string, envList []string) error {
	r := &stepexec.Runner{Name: s.name, Verb: s.verb, StatusEvery: s.statusEvery, LogEvery: s.logEvery, KillGrace: s.killGrace}
	return r.Run(ctx, env, path, s.spec.Argv, dir, envList)
}
