package cli

import (
	"context"
	"fmt"

	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/node"
)

// rollbackOptions are rollback's flags.
type rollbackOptions struct {
	recipeFlags
	to string
}

// runRollback puts a recipe's previous generation that passed its gate back in service
// (or the one --to names), gated as a switch is: on a pass it serves and is recorded as
// serving; on a fail the generation that served before serves again (node.Rollback).
func runRollback(ctx context.Context, stdio IO, args []string) error {
	var o rollbackOptions
	fs := newFlags("rollback", stdio)
	o.register(fs, stdio)
	fs.hide("root") // refused below: a roll back restarts and gates the server here
	fs.StringVar(&o.to, "to", "", "go back to this `GENERATION` (its key or a prefix of it; `sglprov status -f RECIPE` lists them) instead of the previous one")
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.recipe == "" {
		return usageError("rollback", "-f RECIPE is required: the recipe whose generation to go back to")
	}
	if o.root != "" && o.root != "/" {
		return usageError("rollback", "--root is not supported: a roll back restarts and gates the server on this host")
	}
	r, err := o.loadRecipe(stdio)
	if err != nil {
		return err
	}
	if !r.UsesGenerations() {
		return usageError("rollback", fmt.Sprintf("recipe %s keeps no generations (generations: off, or no step builds into one): there is nothing to go back to; apply the recipe at the pin you want", r.Name))
	}
	n := o.node(stdio, nil, nil)
	before := node.ServingGeneration(o.root, o.stateDirPath(), r)
	rb := &node.Rollback{Recipe: n, To: o.to}
	if err := rb.RollBack(ctx); err != nil {
		return fmt.Errorf("rolling back %s: %w", r.Name, err)
	}
	after := node.ServingGeneration(o.root, o.stateDirPath(), r)
	switch {
	case after == "" && node.ServesInPlace(o.root, o.stateDirPath(), r):
		fmt.Fprintf(stdio.Stdout, "%s: the in-place tree serves again (it passed the gate); generation %s is kept\n", r.Name, shortKey(before))
	default:
		fmt.Fprintf(stdio.Stdout, "%s: generation %s serves (it passed the gate); generation %s, which served before, is kept\n", r.Name, shortKey(after), shortKey(before))
	}
	return nil
}

// shortKey is a generation's short key, or "none".
func shortKey(key string) string {
	if key == "" {
		return "none"
	}
	return generation.Short(key)
}
