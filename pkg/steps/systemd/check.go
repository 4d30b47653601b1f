package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// checkTimeout bounds a profile's check command.
const checkTimeout = 2 * time.Minute

// runCheck runs a profile's check command and says why it refuses the profile: "" when it
// exits 0, otherwise the last line it printed (standard error first), or the error.
func runCheck(ctx context.Context, argv []string) string {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return ""
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || ctx.Err() != nil {
		if ctx.Err() != nil {
			return fmt.Sprintf("check %s did not finish in %s", argv[0], checkTimeout)
		}
		return fmt.Sprintf("check %s: %v", argv[0], err)
	}
	for _, out := range []string{stderr.String(), stdout.String()} {
		out = strings.TrimSpace(out)
		if i := strings.LastIndexByte(out, '\n'); i >= 0 {
			out = strings.TrimSpace(out[i+1:])
		}
		if out != "" {
			return out
		}
	}
	return fmt.Sprintf("check %s exited with status %d", argv[0], exit.ExitCode())
}
