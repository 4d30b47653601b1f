package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/knownbad"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// knownBadOptions are known-bad's flags.
type knownBadOptions struct {
	json bool
}

// runKnownBad is `sglprov known-bad`: the table of known-bad combinations that validate
// checks a recipe's pins against, and plan and apply the installed packages.
func runKnownBad(ctx context.Context, stdio IO, args []string) error {
	var o knownBadOptions
	fs := newFlags("known-bad", stdio)
	fs.jsonFlags(&o.json, "print the table as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	rows := knownbad.Table()
	if o.json {
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
	return knownbad.WriteTable(stdio.Stdout, rows)
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
