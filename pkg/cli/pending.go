package cli

import (
	"context"
	"errors"
)

func runDaemon(ctx context.Context, stdio IO, args []string) error {
	return errors.New("daemon: not built yet")
}
