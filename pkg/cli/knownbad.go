package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/knownbad"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// runKnownBad is `sglprov known-bad`: the table of known-bad combinations that validate
// checks a recipe's pins against, and plan and apply the installed packages.
func runKnownBad(ctx context.Context, stdio IO, args []string) error {
	var asJSON bool
	fs := newFlags("known-bad", stdio)
	fs.BoolVar(&asJSON, "json", false, "print the table as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	rows := knownbad.Table()
	if asJSON {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(struct {
			Version string         `json:"version"`
			Rows    []knownbad.Row `json:"rows"`
		}{knownbad.TableVersion, rows}); err != nil {
			return fmt.Errorf("writing the table: %w", err)
		}
		return nil
	}
	fmt.Fprintf(stdio.Stdout, "known-bad combinations, table %s (validate checks the recipe's pins; plan and apply the installed packages)\n\n", knownbad.TableVersion)
	w := tabwriter.NewWriter(stdio.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tPACKAGES\tGPU\tFLAGS")
	for _, r := range rows {
		var pk, fl []string
		for _, p := range r.Packages {
			pk = append(pk, strings.Join(p.Names, "|")+p.Range)
		}
		for _, f := range r.Flags {
			fl = append(fl, strings.TrimSpace(f.Name+" "+f.ValuePrefix+"*"))
		}
		gpuCol := "any"
		if r.ComputeCapabilityMajor != 0 {
			gpuCol = fmt.Sprintf("sm_%dx", r.ComputeCapabilityMajor)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.ID, orDash(strings.Join(pk, ", ")), gpuCol, orDash(strings.Join(fl, " ")))
	}
	w.Flush()
	for _, r := range rows {
		fmt.Fprintf(stdio.Stdout, "\n%s\n  why:     %s\n  fix:     %s\n  source:  %s\n  checked: %s\n",
			r.ID, r.Reason, r.Fix, strings.Join(r.Sources, ", "), r.Checked)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// knownBadPins checks the recipe's pins and launch lines with the GPUs of facts against
// the known-bad table (knownbad.CheckRecipe): a combination in it is a usage error (exit 2)
// naming the row, its reason and its fix.
func knownBadPins(r *recipe.Recipe, facts *gpu.Facts) error {
	var fd map[string]any
	var ccs []string
	if facts != nil {
		fd = facts.TemplateData()
		for _, g := range facts.GPUs {
			ccs = append(ccs, g.ComputeCapability)
		}
	}
	return knownbad.CheckRecipe(r, fd, ccs)
}

// knownBadInstalled runs each service step's check of what its environment holds (plan),
// joined.
func knownBadInstalled(e *engine.Engine) error {
	return e.KnownBad()
}
