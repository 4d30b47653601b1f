package node

import (
	"context"
	"fmt"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gatespec"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// GateOptions choose a smoke gate: a server's URL and what to ask it, or a recipe's smoke
// step (Recipe, with Step, Sets and Insecure) with the URL and the rest as overrides.
type GateOptions struct {
	URL, Model, Recipe, Step, Seed string
	Sets                           []string
	Insecure, Builtin              bool
	ReadyTimeout, RequestTimeout   time.Duration
	MaxTokens                      int
}

// GateConfig builds a smoke gate's config from o, over the recipe's smoke step when
// o.Recipe is given; bad choices are usage errors (exit 2).
func (d *Deps) GateConfig(ctx context.Context, o GateOptions) (gate.Config, error) {
	var spec gatespec.Spec
	switch {
	case o.Recipe != "":
		s, err := d.recipeSmokeSpec(ctx, o)
		if err != nil {
			return gate.Config{}, err
		}
		spec = *s
	case o.URL == "":
		return gate.Config{}, fmt.Errorf("%w: give --url URL or -f RECIPE", exitcode.ErrUsage)
	case o.Step != "" || len(o.Sets) > 0:
		return gate.Config{}, fmt.Errorf("%w: --step and --set need -f RECIPE", exitcode.ErrUsage)
	}
	var seed uint64
	if o.Seed != "" {
		var err error
		if seed, err = gate.ParseSeed(o.Seed); err != nil {
			return gate.Config{}, fmt.Errorf("%w: --seed: %w", exitcode.ErrUsage, err)
		}
	}
	return gatespec.GateConfig(spec, gatespec.Overrides{URL: o.URL, Model: o.Model, MaxTokens: o.MaxTokens,
		ReadyTimeout: o.ReadyTimeout, RequestTimeout: o.RequestTimeout, Builtin: o.Builtin,
		RecipeFile: o.Recipe, Insecure: o.Insecure, Seed: seed}, d.getenv)
}

// recipeSmokeSpec reads the recipe and renders its smoke step (the one named by o.Step,
// else the first): gatespec.RecipeSpec.
func (d *Deps) recipeSmokeSpec(ctx context.Context, o GateOptions) (*gatespec.Spec, error) {
	var r *recipe.Recipe
	var err error
	if d.LoadRecipe == nil {
		return nil, fmt.Errorf("loading recipe %s: no recipe loader", o.Recipe)
	}
	if r, err = d.LoadRecipe(o.Recipe, o.Sets, o.Insecure); err != nil {
		return nil, err
	}
	return gatespec.RecipeSpec(r, o.Recipe, o.Step, func() (map[string]any, error) {
		f, err := d.Facts(ctx)
		if err != nil {
			return nil, err
		}
		return f.TemplateData(), nil
	})
}

// Gate is the recipe's whole smoke gate, readiness bounded by ready (0: the recipe's own
// ready_timeout).
func (n *Recipe) Gate(ctx context.Context, ready time.Duration) (gate.Config, error) {
	return n.deps().GateConfig(ctx, GateOptions{Recipe: n.File, Sets: n.Sets, Insecure: n.Insecure, ReadyTimeout: ready})
}
