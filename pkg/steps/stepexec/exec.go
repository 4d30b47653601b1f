package stepexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/procgroup"
)

// tailLines is how many of the last output lines a failure shows.
const tailLines = 40

// Runner runs one child command the way a step runs its command, and reports its
// progress under the step's name.
type Runner struct {
	// Name is the step's name, shown in the status line.
	Name string
	// Verb is what the status line says the step is doing ("building" when empty).
	Verb string
	// StatusEvery is how often the one-line status is redrawn on a terminal; LogEvery how
	// often a progress line is logged on a pipe. Zero turns that report off.
	StatusEvery, LogEvery time.Duration
	// KillGrace is how long a canceled command has between SIGTERM and SIGKILL.
	KillGrace time.Duration
}

// Exec runs argv (argv[0] looked up in envList's PATH, or relative to dir) in dir with
// envList as its whole environment, the way a build step runs its command: output to the
// step log (env.Out), progress to env.Console, the process group killed when ctx ends
// (SIGTERM, then SIGKILL), and on failure a *Failure with the last lines and the log's
// path. The packages, command and allreduce step kinds run their commands through it.
func Exec(ctx context.Context, env *engine.Env, name string, argv []string, dir string, envList []string) error {
	path, err := LookPath(argv[0], dir, envList)
	if err != nil {
		return fmt.Errorf("finding %s: %w", argv[0], err)
	}
	r := &Runner{Name: name, Verb: "running", StatusEvery: time.Second, LogEvery: 30 * time.Second, KillGrace: 10 * time.Second}
	return r.Run(ctx, env, path, argv, dir, envList)
}

// Run runs the executable at path with argv (argv[0] the name it is shown by) in dir with
// envList as its whole environment, in its own process group with its output going to the
// step log (env.Out) and its progress to env.Console; it kills the group when ctx is
// canceled: SIGTERM, then SIGKILL after KillGrace. A command that exits unsuccessfully
// returns a *Failure.
func (s *Runner) Run(ctx context.Context, env *engine.Env, path string, argv []string, dir string, envList []string) error {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir = dir
	cmd.Env = envList
	mon := newMonitor(time.Now(), tailLines)
	out := env.Out
	if out == nil {
		out = io.Discard
	}
	w := &monitorWriter{out: out, mon: mon}
	cmd.Stdout, cmd.Stderr = w, w
	// Its own process group, killed as a whole on cancel; and it dies with sglprov, so a
	// killed run leaves no build behind to race the next one. A process the build left
	// behind keeps running, and may hold the pipe open: reading stops soon after.
	c, err := procgroup.Start(cmd, procgroup.Options{Grace: s.KillGrace, ParentDeath: syscall.SIGKILL,
		KeepLeftovers: true, OutputGrace: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	stopProgress := s.startProgress(env, mon)

	canceled := false
	select {
	case <-c.Exited():
	case <-ctx.Done():
		canceled = true
		_ = c.Stop()
	}
	waitErr := c.Wait()
	mon.flush()
	stopProgress()

	if canceled {
		return fmt.Errorf("running %s: %w", argv[0], context.Cause(ctx))
	}
	if waitErr == nil {
		return nil
	}
	var exitErr *exec.ExitError
	if !errors.As(waitErr, &exitErr) {
		return fmt.Errorf("running %s: %w", argv[0], waitErr)
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
	return &Failure{Argv0: argv[0], Status: status, Tail: tail, LogPath: env.LogPath,
		msg: strings.TrimRight(b.String(), "\n"), err: exitErr}
}

// monitorWriter writes a command's output to the step log, whatever that write's error,
// and feeds it to the monitor.
type monitorWriter struct {
	out io.Writer
	mon *monitor
}

func (w *monitorWriter) Write(b []byte) (int, error) {
	_, _ = w.out.Write(b)
	w.mon.feed(b)
	return len(b), nil
}

// Failure is the error of a step's command that exited unsuccessfully.
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
