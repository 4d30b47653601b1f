package cli

import (
	"context"
	"encoding/json"
	"fmt"

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
	if len(facts.GPUs) == 0 {
		fmt.Fprintf(stdio.Stdout, "No NVIDIA GPU found: NVML works (driver %s) but reports no GPU.\n"+
			"  Check that the GPUs are visible to this host or container (lspci | grep -i nvidia, nvidia-smi -L).\n",
			facts.DriverVersion)
		return nil
	}
	return gpu.FormatTable(stdio.Stdout, facts)
}
