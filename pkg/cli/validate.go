package cli

import (
	"context"
	"fmt"
)

// validateOptions are validate's flags: the recipe flags alone.
type validateOptions struct {
	recipeFlags
}

// parseValidate parses validate's command line into its options.
func parseValidate(stdio IO, args []string) (*validateOptions, error) {
	var o validateOptions
	fs := newFlags("validate", stdio)
	o.register(fs, stdio)
	return &o, parse(fs, args)
}

// validateRun checks the recipe (node.Recipe.Validate) and prints the verdict, what could
// not be checked here, and the steps' warnings.
func validateRun(ctx context.Context, stdio IO, o *validateOptions) error {
	v, err := o.unlogged(stdio).Validate(ctx)
	if err != nil {
		return err
	}
	r := v.Recipe
	fmt.Fprintf(stdio.Stdout, "%s: recipe %q is valid (%s, %s; every step built)\n",
		o.recipe, r.Name, plural(len(r.Steps), "step"), plural(len(r.Profiles), "profile"))
	for _, line := range v.Unchecked {
		fmt.Fprintf(stdio.Stdout, "  %s\n", line)
	}
	for _, w := range v.Warnings {
		fmt.Fprintf(stdio.Stderr, "%s: warning: %s\n", o.recipe, w)
	}
	return nil
}

// plural is "1 step", "2 steps", "0 steps".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
