package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// runSchema is `sglprov schema [recipe|report|status|plan]`: the JSON Schema of recipes, made
// from the recipe types and the step kinds this build has, or of report.json or
// `status --json`, made from the types they are encoded from.
func runSchema(ctx context.Context, stdio IO, args []string) error {
	fs := newFlags("schema", stdio)
	if err := fs.Parse(args); err != nil {
		return fs.flagError(err)
	}
	switch fs.NArg() {
	case 0:
		return writeSchema(stdio)
	case 1:
	default:
		return usageError("schema", fmt.Sprintf("give one of recipe, report, status or plan, not %q", strings.Join(fs.Args(), " ")))
	}
	name := fs.Arg(0)
	if name == "recipe" {
		return writeSchema(stdio)
	}
	o, ok := outputSchemas[name]
	if !ok {
		return usageError("schema", fmt.Sprintf("unknown schema %q: want recipe, report, status or plan", name))
	}
	enc := json.NewEncoder(stdio.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(outputSchema(o.id, o.title, o.t))
}

func writeSchema(stdio IO) error {
	enc := json.NewEncoder(stdio.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(recipe.JSONSchema(steps.Specs(stdio.Factory.Registry())))
}
