package cli

import (
	"context"
	"errors"
)

func runSmoke(ctx context.Context, stdio IO, args []string) error {
	return errors.New("smoke: not built yet")
}

func runDaemon(ctx context.Context, stdio IO, args []string) error {
	return errors.New("daemon: not built yet")
}
