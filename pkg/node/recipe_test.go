package node_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gatespec"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
	gate "github.com/sglprov/sglprov/pkg/smoke"
	"github.com/sglprov/sglprov/pkg/steps"
)

// realRecipe is the recipe file path on a node whose state dir is state, built with the
// real step kinds: what the command layer gives the node operations, less its flags. sets
// are its --set values, read at each use.
func realRecipe(t *testing.T, path, state string, sets *[]string) *node.Recipe {
	t.Helper()
	reg := steps.Registry()
	quiet := func(io.Writer) *log.Logger { return log.New(io.Discard) }
	n := &node.Recipe{File: path, StateDir: state, Held: &node.Held{}}
	n.Load = func() (*recipe.Recipe, error) { return recipe.Load(path, steps.Specs(reg), *sets) }
	n.Facts = func(context.Context) (*gpu.Facts, error) { return nil, gpu.ErrNoGPU }
	opts := func(r *recipe.Recipe) engine.Options {
		return engine.Options{Recipe: r, RecipeDir: filepath.Dir(path), Registry: reg, StateDir: state, NewLogger: quiet}
	}
	n.Engine = func(_ context.Context, mod func(*engine.Options)) (*engine.Engine, error) {
		r, err := n.Load()
		if err != nil {
			return nil, err
		}
		o := opts(r)
		if mod != nil {
			mod(&o)
		}
		return engine.New(o)
	}
	n.Steps = func(r *recipe.Recipe, facts *gpu.Facts) (*engine.Engine, error) {
		o := opts(r)
		o.Facts = facts
		return engine.New(o)
	}
	n.Apply = func(ctx context.Context) (*engine.Report, *engine.Engine, error) {
		release, err := n.Hold()
		if err != nil {
			return nil, nil, err
		}
		defer release()
		e, err := n.Engine(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		rep, err := e.Apply(ctx)
		return rep, e, err
	}
	n.Gate = func(_ context.Context, ready time.Duration) (gate.Config, error) {
		r, err := n.Load()
		if err != nil {
			return gate.Config{}, err
		}
		spec, err := gatespec.RecipeSpec(r, path, "", func() (map[string]any, error) { return nil, gpu.ErrNoGPU })
		if err != nil {
			return gate.Config{}, err
		}
		if ready > 0 {
			spec.ReadyTimeout = ready.String()
		}
		return spec.Config(func(string) string { return "" })
	}
	return n
}

// writeRecipe writes text as dir's recipe file r.yaml and returns its path.
func writeRecipe(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
