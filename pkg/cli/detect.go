package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

func runDetect(ctx context.Context, stdio IO, args []string) error {
	var asJSON bool
	fs := newFlags("detect", stdio)
	fs.BoolVar(&asJSON, "json", false, "print the facts as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	facts, err := gpu.Detect(ctx, stdio.Getenv)
	switch {
	case errors.Is(err, gpu.ErrDriverMismatch):
		return fmt.Errorf("%w: %v", engine.ErrReboot, err)
	case errors.Is(err, gpu.ErrNoGPU):
		// zero GPUs is an answer
	case errors.Is(err, gpu.ErrNoLibrary):
		return fmt.Errorf("%w: %v", engine.ErrHost, err)
	case err != nil:
		return fmt.Errorf("detecting GPUs: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(facts)
	}
	return gpu.FormatTable(stdio.Stdout, facts)
}
