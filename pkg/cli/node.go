package cli

import (
	"context"
	"io"
	"time"

	"charm.land/log/v2"

	sglprov "github.com/sglprov/sglprov"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
	gate "github.com/sglprov/sglprov/pkg/smoke"
)

// node is c's recipe on the node as the node operations see it, built with stdio's
// factory: its changes take the node through hold (nil: each takes the state dir's lock),
// and held (nil: none) keeps the engine of its last apply.
func (c *recipeFlags) node(stdio IO, hold *node.Hold, held *node.Held) *node.Recipe {
	if hold == nil {
		hold = &node.Hold{}
	}
	quiet := stdio
	quiet.Stderr = io.Discard
	var n *node.Recipe
	n = &node.Recipe{
		File:     c.recipe,
		Sets:     c.sets,
		Root:     c.root,
		StateDir: c.stateDirPath(),
		Load:     func() (*recipe.Recipe, error) { return c.loadRecipe(stdio) },
		Facts:    func(ctx context.Context) (*gpu.Facts, error) { return stdio.Factory.Facts(ctx, stdio.Getenv) },
		Engine: func(ctx context.Context, mod func(*engine.Options)) (*engine.Engine, error) {
			e, _, err := c.newEngine(ctx, quiet, nil, mod)
			return e, err
		},
		Steps: func(r *recipe.Recipe, facts *gpu.Facts) (*engine.Engine, error) {
			opts, err := n.StepOptions(r, facts)
			if err != nil {
				return nil, err
			}
			opts.NewLogger = func(io.Writer) *log.Logger { return log.New(io.Discard) }
			return stdio.Factory.Engine(opts)
		},
		Apply: func(ctx context.Context) (*engine.Report, *engine.Engine, error) {
			return applyKeep(ctx, stdio, c, hold, nil)
		},
		Gate: func(ctx context.Context, ready time.Duration) (gate.Config, error) {
			return smokeConfig(ctx, stdio, smokeOptions{recipe: c.recipe, sets: c.sets, insecure: c.insecure, readyTimeout: ready})
		},
		Holds:    hold,
		Acquire:  stdio.Factory.Lock,
		Held:     held,
		Registry: stdio.Factory.Registry(),
		Builtin:  sglprov.Assets,
		Insecure: c.insecure,
		Getenv:   stdio.Getenv,
		NewCache: stdio.Factory.Cache,
	}
	return n
}
