package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/node"
)

// rollbackOptions are rollback's flags.
type rollbackOptions struct {
	recipeFlags
	to string
}

// parseRollback parses rollback's command line into its options: -f is required, --root
// refused (a roll back restarts and gates the server here).
func parseRollback(stdio IO, args []string) (*rollbackOptions, error) {
	var o rollbackOptions
	fs := newFlags("rollback", stdio)
	o.register(fs, stdio)
	fs.hide("root") // refused below: a roll back restarts and gates the server here
	fs.StringVar(&o.to, "to", "", "go back to this `GENERATION` (its key or a prefix of it; `sglprov status -f RECIPE` lists them) instead of the previous one")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if o.recipe == "" {
		return nil, usageError("rollback", "-f RECIPE is required: the recipe whose generation to go back to")
	}
	if o.root != "" && o.root != "/" {
		return nil, usageError("rollback", "--root is not supported: a roll back restarts and gates the server on this host")
	}
	return &o, nil
}

// rollbackRun puts a recipe's previous generation that passed its gate back in service
// (or the one --to names), gated as a switch is (node.Recipe.Rollback), and says what
// serves.
func rollbackRun(ctx context.Context, stdio IO, o *rollbackOptions) error {
	n, err := o.node(stdio)
	if err != nil {
		return err
	}
	rb, err := n.Rollback(ctx, o.to)
	if errors.Is(err, node.ErrNoGenerations) {
		return usageError("rollback", fmt.Sprintf("recipe %s keeps no generations (generations: off, or no step builds into one): there is nothing to go back to; apply the recipe at the pin you want", rb.Recipe))
	}
	if err != nil {
		return err
	}
	if rb.InPlace {
		fmt.Fprintf(stdio.Stdout, "%s: the in-place tree serves again (it passed the gate); generation %s is kept\n", rb.Recipe, shortKey(rb.Before))
		return nil
	}
	fmt.Fprintf(stdio.Stdout, "%s: generation %s serves (it passed the gate); generation %s, which served before, is kept\n", rb.Recipe, shortKey(rb.After), shortKey(rb.Before))
	return nil
}

// shortKey is a generation's short key, or "none".
func shortKey(key string) string {
	if key == "" {
		return "none"
	}
	return generation.Short(key)
}
