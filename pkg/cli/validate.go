package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	sglprov "github.com/sglprov/sglprov"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps/download"
)

func runValidate(ctx context.Context, stdio IO, args []string) error {
	var c recipeFlags
	fs := newFlags("validate", stdio)
	c.register(fs, stdio)
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
	dir, _ := filepath.Abs(filepath.Dir(c.recipe))
	e, err := stdio.Factory.Engine(engine.Options{Recipe: r, RecipeDir: dir, Registry: stdio.Factory.Registry(), Facts: facts,
		Root: c.root, StateDir: c.stateDirPath(), Builtin: sglprov.Assets, InsecurePermissions: c.insecure, IgnoreState: true})
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
	for _, line := range unchecked(r, standIn) {
		fmt.Fprintf(stdio.Stdout, "  %s\n", line)
	}
	for _, w := range download.RevisionWarnings(r) {
		fmt.Fprintf(stdio.Stderr, "%s: warning: %s\n", c.recipe, w)
	}
	return nil
}

// unchecked names what validate leaves to plan because it needs the host: the
// requirements, the required commands and, when the steps were built with a stand-in
// host's facts (standIn says why there are no real ones), the facts each step uses.
func unchecked(r *recipe.Recipe, standIn string) []string {
	var host []string
	if r.RequiresSet {
		host = append(host, "requires (the GPUs, driver and CUDA)")
	}
	if names := r.Commands.Names(); len(names) > 0 {
		host = append(host, "requires.commands ("+strings.Join(names, ", ")+")")
	}
	for _, p := range r.Profiles {
		if p.Match.ComputeCapability != "" {
			host = append(host, "which profile matches the GPUs")
			break
		}
	}
	var out []string
	if len(host) > 0 {
		out = append(out, "unchecked, needs the host (plan checks it): "+strings.Join(host, "; "))
	}
	if standIn == "" {
		return out
	}
	var uses []string
	for _, s := range r.Steps {
		var fs []string
		for _, ref := range r.ExpandRefs(s) {
			// The generation's folder is no host fact: it comes from the recipe's text.
			if !strings.HasPrefix(ref, "vars.") && ref != recipe.GenerationDirRef {
				fs = append(fs, ref)
			}
		}
		if len(fs) > 0 {
			uses = append(uses, fmt.Sprintf("step %s (%s)", s.Name, strings.Join(fs, ", ")))
		}
	}
	if len(uses) > 0 {
		out = append(out, "unchecked, rendered with a stand-in GPU ("+standIn+"): "+strings.Join(uses, "; "))
	}
	return out
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
