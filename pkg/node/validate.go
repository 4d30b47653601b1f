package node

import (
	"context"
	"strings"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/knownbad"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Validated is what Validate found of a valid recipe: the recipe, what could not be
// checked without the real GPUs (its Unchecked lines), and the warnings its steps' kinds
// give of it (a hub revision that is a branch).
type Validated struct {
	Recipe    *recipe.Recipe
	Unchecked []string
	Warnings  []string
}

// Validate checks the recipe on any machine: every step is built and checked, so that the
// bad input plan and apply refuse (a branch where a commit is needed, a profile that is
// not defined, a missing required field, a FIFO as a patch) is refused here too, and its
// pins and launch lines are checked against the known-bad table. Templates that use GPU
// facts are rendered with this host's facts, or, where there are none, with those of a
// stand-in host that meets the recipe's requirements: what depends on the real values is
// said to be unchecked, by name.
func (n *Recipe) Validate(ctx context.Context) (*Validated, error) {
	r, err := n.Load()
	if err != nil {
		return nil, err
	}
	d := n.deps()
	var facts *gpu.Facts
	standIn := ""
	if r.NeedsFacts() {
		if f, err := d.Facts(ctx); err == nil {
			facts = f
		} else {
			line, _, _ := strings.Cut(err.Error(), "\n")
			facts, standIn = gpu.StandIn(r.Requires), strings.TrimSuffix(line, ".")
		}
	}
	opts, err := n.StepOptions(r, facts)
	if err != nil {
		return nil, err
	}
	opts.InsecurePermissions, opts.IgnoreState = n.Insecure, true
	e, err := d.engine(opts)
	if err != nil {
		return nil, err
	}
	// The files the steps name (series, patches, templates, question files) and what each
	// step refuses from its text alone (refs, profile names).
	err = e.Check()
	e.Close()
	if err != nil {
		return nil, err
	}
	kbFacts := facts
	if kbFacts == nil && r.Requires.GPU.ComputeCapability != "" {
		kbFacts = gpu.StandIn(r.Requires)
	}
	if err := KnownBadPins(r, kbFacts); err != nil {
		return nil, err
	}
	return &Validated{Recipe: r, Unchecked: r.Unchecked(standIn), Warnings: d.Registry.Warnings(r)}, nil
}

// KnownBadPins checks the recipe's pins and launch lines with the GPUs of facts against
// the known-bad table (knownbad.CheckRecipe): a combination in it is a usage error (exit 2)
// naming the row, its reason and its fix.
func KnownBadPins(r *recipe.Recipe, facts *gpu.Facts) error {
	var fd map[string]any
	var ccs []string
	if facts != nil {
		fd = facts.TemplateData()
		for _, g := range facts.GPUs {
			ccs = append(ccs, g.ComputeCapability)
		}
	}
	return knownbad.CheckRecipe(r, fd, ccs)
}
