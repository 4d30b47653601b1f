package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/steps"
)

// validateOptions are validate's flags: the recipe flags alone.
type validateOptions struct {
	recipeFlags
}

func runValidate(ctx context.Context, stdio IO, args []string) error {
	var o validateOptions
	fs := newFlags("validate", stdio)
	o.register(fs, stdio)
	c := &o.recipeFlags
	if err := parse(fs, args); err != nil {
		return err
	}
	r, err := c.loadRecipe(stdio)
	if err != nil {
		return err
	}
	// Every step is built and checked, on any machine, so that the bad input plan and apply
	// refuse (a branch where a commit is needed, a profile that is not defined, a missing
	// required field, a FIFO as a patch) is refused here too. Templates that use GPU facts
	// are rendered with this host's facts, or, where there are none, with those of a
	// stand-in host that meets the recipe's requirements: what depends on the real values
	// is said to be unchecked, by name.
	var facts *gpu.Facts
	standIn := ""
	if r.NeedsFacts() {
		if f, err := detectFacts(ctx, stdio); err == nil {
			facts = f
		} else {
			facts, standIn = gpu.StandIn(r.Requires), strings.TrimSuffix(firstLine(err.Error()), ".")
		}
	}
	opts, err := c.node(stdio, nil, nil).StepOptions(r, facts)
	if err != nil {
		return err
	}
	opts.InsecurePermissions, opts.IgnoreState = c.insecure, true
	e, err := stdio.Factory.Engine(opts)
	if err != nil {
		return err
	}
	// The files the steps name (series, patches, templates, question files) and what each
	// step refuses from its text alone (refs, profile names).
	err = e.Check()
	e.Close()
	if err != nil {
		return err
	}
	// Pins and launch lines that make a known-bad combination (`sglprov known-bad`).
	kbFacts := facts
	if kbFacts == nil && r.Requires.GPU.ComputeCapability != "" {
		kbFacts = gpu.StandIn(r.Requires)
	}
	if err := knownBadPins(r, kbFacts); err != nil {
		return err
	}
	fmt.Fprintf(stdio.Stdout, "%s: recipe %q is valid (%s, %s; every step built)\n",
		c.recipe, r.Name, plural(len(r.Steps), "step"), plural(len(r.Profiles), "profile"))
	for _, line := range r.Unchecked(standIn) {
		fmt.Fprintf(stdio.Stdout, "  %s\n", line)
	}
	for _, w := range steps.RecipeWarnings(r) {
		fmt.Fprintf(stdio.Stderr, "%s: warning: %s\n", c.recipe, w)
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// plural is "1 step", "2 steps", "0 steps".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
