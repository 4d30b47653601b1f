package daemon

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/procgroup"
)

// hookOutputLimit bounds what is kept of a hook's output (its last bytes go to the log).
const hookOutputLimit = 8 << 10

// hookKillGrace is how long a hook's process group has between SIGTERM and SIGKILL, once
// the hook has run past its timeout (or the daemon stops).
const hookKillGrace = 5 * time.Second

// hookOutputGrace is how long the output of a hook that has exited is still read: what
// its process group wrote is in the pipe already; a process that left the group (setsid)
// and keeps the pipe open is not waited for.
const hookOutputGrace = time.Second

// RunHook runs argv (no shell) with env added to the daemon's environment, in a process
// group of its own. The hook is judged by how its process ends: its exit status, however
// long a child it left behind would run; that group is killed (SIGKILL) as soon as the
// hook's process has exited, so nothing it started outlives it. When the hook runs past
// timeout, or ctx ends, the whole group gets SIGTERM, then SIGKILL 5 s later. It returns
// the last 8 KiB of the group's output, and an error that names how the hook ended when it
// did not exit 0.
func RunHook(ctx context.Context, argv []string, env []string, timeout time.Duration) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("the hook has no argv")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(cmd.Environ(), env...)
	out := &procgroup.Tail{Max: hookOutputLimit}
	cmd.Stdout, cmd.Stderr = out, out
	// Its group is killed as soon as the hook's process has exited, and its output read
	// for hookOutputGrace more: what waits on the pipe is not waited for.
	c, err := procgroup.Start(cmd, procgroup.Options{Grace: hookKillGrace, OutputGrace: hookOutputGrace})
	if err != nil {
		return "", fmt.Errorf("running %s: %w", argv[0], err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var cut string // why the hook was stopped, "" when it ended by itself
	select {
	case <-c.Exited():
	case <-timer.C:
		cut = fmt.Sprintf("still running after %s: killed", timeout)
	case <-ctx.Done():
		cut = fmt.Sprintf("stopped (%v): killed", context.Cause(ctx))
	}
	if cut != "" {
		_ = c.Stop()
	}
	err = c.Wait()
	tail := strings.TrimSpace(out.String())
	switch {
	case cut != "":
		return tail, fmt.Errorf("running %s: %s", argv[0], cut)
	case err != nil:
		return tail, fmt.Errorf("running %s: %w", argv[0], err)
	}
	return tail, nil
}
