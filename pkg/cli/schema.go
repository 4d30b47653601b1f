package cli

import (
	"context"
	"encoding/json"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// runSchema is `sglprov schema`: the JSON Schema of recipes, made from the recipe types and
// the step kinds this build has.
func runSchema(ctx context.Context, stdio IO, args []string) error {
	fs := newFlags("schema", stdio)
	if err := parse(fs, args); err != nil {
		return err
	}
	return writeSchema(stdio)
}

func writeSchema(stdio IO) error {
	enc := json.NewEncoder(stdio.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(recipe.JSONSchema(steps.Specs(steps.Registry())))
}
