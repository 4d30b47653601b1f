package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// tailLines is how many of the last output lines a failure shows.
const tailLines = 40

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
			engine.ErrHost, noArchWhy(env))
	}
	if _, err := lookPath(s.ccache, dir, environ(vars)); err == nil {
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
	path, err := lookPath(s.spec.Argv[0], dir, envList)
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

// Exec runs argv (argv[0] looked up in envList's PATH, or relative to dir) in dir with
// envList as its whole environment, the way a build step runs its command: output to the
// step log (env.Out), progress to env.Console, the process group killed when ctx ends
// (SIGTERM, then SIGKILL), and on failure a *Failure with the last lines and the log's
// path. The command step kind runs its commands through it.
func Exec(ctx context.Context, env *engine.Env, name string, argv []string, dir string, envList []string) error {
	path, err := lookPath(argv[0], dir, envList)
	if err != nil {
		return fmt.Errorf("finding %s: %w", argv[0], err)
	}
	s := &Step{name: name, spec: Spec{Argv: argv}, statusEvery: time.Second, logEvery: 30 * time.Second, killGrace: 10 * time.Second, verb: "running"}
	return s.execute(ctx, env, path, dir, envList)
}

// execute runs the command in its own process group with its output going to the step log,
// and kills the group when ctx is canceled: SIGTERM, then SIGKILL after the grace period.
func (s *Step) execute(ctx context.Context, env *engine.Env, path, dir string, envList []string) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("creating output pipe: %w", err)
	}
	defer pr.Close()
	cmd := exec.Command(path, s.spec.Argv[1:]...)
	cmd.Args[0] = s.spec.Argv[0]
	cmd.Dir = dir
	cmd.Env = envList
	cmd.Stdout, cmd.Stderr = pw, pw
	// Its own process group, killed as a whole on cancel; and it dies with sglprov, so a
	// killed run leaves no build behind to race the next one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("starting %s: %w", s.spec.Argv[0], err)
	}
	pw.Close()
	pgid := cmd.Process.Pid

	mon := newMonitor(time.Now(), tailLines)
	out := env.Out
	if out == nil {
		out = io.Discard
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		mon.copy(out, pr)
	}()
	stopProgress := s.startProgress(env, mon)

	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()

	var waitErr error
	canceled := false
	select {
	case waitErr = <-waitDone:
	case <-ctx.Done():
		canceled = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		grace := time.NewTimer(s.killGrace)
		select {
		case waitErr = <-waitDone:
		case <-grace.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			waitErr = <-waitDone
		}
		grace.Stop()
		// Whatever of the group outlived its leader goes too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	// A process the build left behind may hold the pipe open; stop reading soon after.
	select {
	case <-readDone:
	case <-time.After(2 * time.Second):
		pr.Close()
		<-readDone
	}
	stopProgress()

	if canceled {
		return fmt.Errorf("running %s: %w", s.spec.Argv[0], context.Cause(ctx))
	}
	if waitErr == nil {
		return nil
	}
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) {
		return fmt.Errorf("running %s: %w", s.spec.Argv[0], waitErr)
	}
	status := exitErr.Error() // "exit status 3" or "signal: killed"
	tail := mon.tail()
	var b strings.Builder
	fmt.Fprintf(&b, "last %d lines of output:\n", len(tail))
	for _, l := range tail {
		b.WriteString("  ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if env.LogPath != "" {
		fmt.Fprintf(&b, "full log: %s", env.LogPath)
	}
	return &Failure{Argv0: s.spec.Argv[0], Status: status, Tail: tail, LogPath: env.LogPath,
		msg: strings.TrimRight(b.String(), "\n"), err: exitErr}
}

// Failure is the error of a build command that exited unsuccessfully.
type Failure struct {
	// Argv0 is the command; Status how it ended ("exit status 3", "signal: killed").
	Argv0, Status string
	// Tail holds the last lines of its output.
	Tail []string
	// LogPath is the step log holding the whole output.
	LogPath string

	msg string
	err error
}

// Error says how the command ended, its last lines of output and where the log is.
func (f *Failure) Error() string {
	return fmt.Sprintf("running %s: %s; %s", f.Argv0, f.Status, f.msg)
}

// Unwrap returns the *exec.ExitError.
func (f *Failure) Unwrap() error { return f.err }
