package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/hostcmd"
)

// detectOptions are detect's flags.
type detectOptions struct {
	json bool
}

// parseDetect parses detect's command line into its options.
func parseDetect(stdio IO, args []string) (*detectOptions, error) {
	var o detectOptions
	fs := newFlags("detect", stdio)
	fs.jsonFlags(&o.json, "print the facts as JSON")
	return &o, parse(fs, args)
}

// detectRun reads the host's GPU facts (node.Deps.Facts) and prints them.
func detectRun(ctx context.Context, stdio IO, o *detectOptions) error {
	facts, err := detectFacts(ctx, stdio)
	if err != nil {
		if o.json {
			// A script reading --json gets JSON either way: the error and its exit code.
			writeDetectError(stdio, err)
		}
		return err
	}
	// A host without a GPU cannot serve: exit 4, as DESIGN's table says for a host that
	// falls short (the facts are still shown).
	var noGPU error
	if len(facts.GPUs) == 0 {
		noGPU = &exitcode.Error{Msg: "no NVIDIA GPU found: NVML works (driver " + facts.DriverVersion + ") but reports no GPU", Kind: exitcode.ErrHost}
	}
	// The CUDA toolkit (nvcc) is not the driver's CUDA: show both when nvcc is found (on the
	// PATH, or where CUDA builds look for it).
	var nvcc *hostcmd.Found
	if f := (hostcmd.PathLooker{Path: stdio.Getenv("PATH"), Getenv: stdio.Getenv}).Lookup(ctx, "nvcc"); f.Path != "" {
		nvcc = &f
	}
	if o.json {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		out := struct {
			*gpu.Facts
			NVCC     *hostcmd.Found `json:"nvcc,omitempty"`
			Error    string         `json:"error,omitempty"`
			ExitCode int            `json:"exit_code,omitempty"`
		}{Facts: facts, NVCC: nvcc}
		if noGPU != nil {
			out.Error, out.ExitCode = exitcode.Message(noGPU), exitcode.Of(noGPU)
		}
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("writing the facts: %w", err)
		}
		return noGPU
	}
	if len(facts.GPUs) == 0 {
		fmt.Fprintf(stdio.Stdout, "No NVIDIA GPU found: NVML works (driver %s) but reports no GPU.\n"+
			"  Check that the GPUs are visible to this host or container (lspci | grep -i nvidia, nvidia-smi -L).\n",
			facts.DriverVersion)
	} else if err := gpu.FormatTable(stdio.Stdout, facts); err != nil {
		return err
	} else if err := gpu.FormatHealth(stdio.Stdout, facts); err != nil {
		return err
	}
	if nvcc != nil {
		v := nvcc.Version
		if v == "" {
			v = "version unknown (" + nvcc.Err + ")"
		}
		where := nvcc.Path
		if nvcc.OffPath {
			where += ", not on the PATH"
		}
		fmt.Fprintf(stdio.Stdout, "nvcc:   %s at %s (the CUDA toolkit; CUDA above is the driver's, which requires.cuda checks)\n", v, where)
	}
	return noGPU
}

// writeDetectError prints detect's error as a JSON object on stdout: {"error": ...,
// "exit_code": N}.
func writeDetectError(stdio IO, err error) {
	enc := json.NewEncoder(stdio.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}{exitcode.Message(err), exitcode.Of(err)})
}
