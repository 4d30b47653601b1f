package cli

import (
	"context"

	sglprov "github.com/sglprov/sglprov"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Deps are what the node operations build their work with, from f's constructors, writing
// on stdio's streams (node.Deps).
func (f *Factory) Deps(stdio IO) *node.Deps {
	return &node.Deps{
		LoadRecipe:  f.Recipe,
		DetectFacts: func(ctx context.Context) (*gpu.Facts, error) { return f.Facts(ctx, stdio.Getenv) },
		NewEngine:   f.Engine,
		NewCache:    f.Cache,
		NewManager:  f.Manager,
		Lock:        f.Lock,
		SharedLock:  f.SharedLock,
		Registry:    f.Registry(),
		Builtin:     sglprov.Assets,
		Getenv:      stdio.Getenv,
		Stdout:      stdio.Stdout,
		Stderr:      stdio.Stderr,
		Terminal:    isTerminal(stdio.Stderr),
		Journal:     stdio.journal,
	}
}

// node is c's recipe on the node as the node operations see it, built with stdio's
// factory; each of its changes takes the state dir's lock. A --log-format or --log-level
// it does not know is a usage error.
func (c *recipeFlags) node(stdio IO) (*node.Recipe, error) {
	newLogger, err := c.newLoggerFunc()
	if err != nil {
		return nil, err
	}
	n := c.unlogged(stdio)
	n.NewLogger = newLogger
	return n, nil
}

// unlogged is c's recipe on the node for the operations that build no engine that logs
// (validate, remove, gc): the log flags are not read.
func (c *recipeFlags) unlogged(stdio IO) *node.Recipe {
	return &node.Recipe{File: c.recipe, Sets: c.sets, Root: c.root, StateDir: c.stateDirPath(), Insecure: c.insecure,
		Deps: stdio.Factory.Deps(stdio)}
}

// loadRecipe checks the recipe file's permissions and parses it (stdio's factory: once
// per command).
func (c *recipeFlags) loadRecipe(stdio IO) (*recipe.Recipe, error) {
	return stdio.Factory.Recipe(c.recipe, c.sets, c.insecure)
}
