package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sglprov/sglprov/pkg/knownbad"
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
