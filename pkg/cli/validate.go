package cli

import (
	"context"
	"fmt"
)

func runValidate(ctx context.Context, stdio IO, args []string) error {
	var c common
	fs := newFlags("validate", stdio)
	c.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	r, err := c.loadRecipe()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "%s: recipe %q is valid (%d steps, %d profiles)\n", c.recipe, r.Name, len(r.Steps), len(r.Profiles))
	return nil
}
