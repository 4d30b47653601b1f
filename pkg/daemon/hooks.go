package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
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
	r, w, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("running %s: making its output pipe: %w", argv[0], err)
	}
	defer r.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(cmd.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// An *os.File: the child writes to the pipe itself, and Wait returns when the hook's
	// process exits, not when every process that inherited the pipe has closed it.
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return "", fmt.Errorf("running %s: %w", argv[0], err)
	}
	pgid := cmd.Process.Pid
	out := &tailBuffer{max: hookOutputLimit}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, r)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var cut string // why the hook was stopped, "" when it ended by itself
	select {
	case err = <-exited:
	case <-timer.C:
		cut = fmt.Sprintf("still running after %s: killed", timeout)
	case <-ctx.Done():
		cut = fmt.Sprintf("stopped (%v): killed", context.Cause(ctx))
	}
	if cut != "" {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		grace := time.NewTimer(hookKillGrace)
		select {
		case err = <-exited:
		case <-grace.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			err = <-exited
		}
		grace.Stop()
	}
	// Whatever the hook left behind in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-copied:
	case <-time.After(hookOutputGrace):
		r.Close() // ends the copy: a process outside the group still holds the pipe
		<-copied
	}
	tail := strings.TrimSpace(out.String())
	switch {
	case cut != "":
		return tail, fmt.Errorf("running %s: %s", argv[0], cut)
	case err != nil:
		return tail, fmt.Errorf("running %s: %w", argv[0], err)
	}
	return tail, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.b, []byte("?")))
}
