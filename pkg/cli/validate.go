package cli

import (
	"context"
	"fmt"
	"path/filepath"

	sglprov "github.com/sglprov/sglprov"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/steps"
	"github.com/sglprov/sglprov/pkg/steps/download"
)

func runValidate(ctx context.Context, stdio IO, args []string) error {
	var c common
	fs := newFlags("validate", stdio)
	c.register(fs, stdio)
	if err := parse(fs, args); err != nil {
		return err
	}
	r, err := c.loadRecipe()
	if err != nil {
		return err
	}
	// Build every step too, so that a bad value inside a step (a branch where a commit is
	// needed, a path that leaves its folder) is found now, not at apply. Templates that use
	// GPU facts need them: without a GPU (or a fixture) those steps are left to plan.
	var facts *gpu.Facts
	checked := "every step built"
	if r.NeedsFacts() {
		if f, err := detectFacts(ctx, stdio); err == nil {
			facts = f
		} else {
			checked = "steps not built: no GPU facts here (" + err.Error() + ")"
		}
	}
	if !r.NeedsFacts() || facts != nil {
		dir, _ := filepath.Abs(filepath.Dir(c.recipe))
		e, err := engine.New(engine.Options{Recipe: r, RecipeDir: dir, Registry: steps.Registry(), Facts: facts,
			Root: c.root, StateDir: c.stateDirPath(), Builtin: sglprov.Assets, InsecurePermissions: c.insecure, IgnoreState: true})
		if err != nil {
			return err
		}
		// The files the steps name (series, patches, templates, question files): what a
		// run would refuse as bad input (a FIFO, another user's file) is refused here too.
		err = e.ReadFiles()
		e.Close()
		if err != nil {
			return err
		}
	}
	for _, w := range download.RevisionWarnings(r) {
		fmt.Fprintf(stdio.Stderr, "%s: warning: %s\n", c.recipe, w)
	}
	fmt.Fprintf(stdio.Stdout, "%s: recipe %q is valid (%d steps, %d profiles; %s)\n", c.recipe, r.Name, len(r.Steps), len(r.Profiles), checked)
	return nil
}
