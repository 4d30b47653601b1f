package cli

import (
	"context"
	"encoding/json"

	"github.com/sglprov/sglprov/pkg/gpu"
)

func runDetect(ctx context.Context, stdio IO, args []string) error {
	var asJSON bool
	fs := newFlags("detect", stdio)
	fs.BoolVar(&asJSON, "json", false, "print the facts as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	facts, err := detectFacts(ctx, stdio)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(facts)
	}
	return gpu.FormatTable(stdio.Stdout, facts)
}
