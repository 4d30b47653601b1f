package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hookOutputLimit bounds what is kept of a hook's output (its last bytes go to the log).
const hookOutputLimit = 8 << 10

// RunHook runs argv (no shell) with env added to the daemon's environment, killing its
// process group after timeout (SIGTERM, then SIGKILL 5 s later). It returns the last 8 KiB
// of its output, and an error that names how it ended when it did not exit 0.
func RunHook(ctx context.Context, argv []string, env []string, timeout time.Duration) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("the hook has no argv")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(cmd.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out := &tailBuffer{max: hookOutputLimit}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever the hook left behind in its group goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	tail := strings.TrimSpace(out.String())
	switch {
	case err == nil:
		return tail, nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return tail, fmt.Errorf("running %s: still running after %s: killed", argv[0], timeout)
	default:
		return tail, fmt.Errorf("running %s: %w", argv[0], err)
	}
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
