package node_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// realRecipe is the recipe file path on a node whose state dir is state, built with the
// real step kinds: what the command layer gives the node operations, less its flags. sets
// are its --set values, read at each use.
func realRecipe(t *testing.T, path, state string, sets *[]string) *node.Recipe {
	t.Helper()
	reg := steps.Registry()
	dir := t.TempDir()
	deps := &node.Deps{
		LoadRecipe: func(string, []string, bool) (*recipe.Recipe, error) {
			return recipe.Load(path, steps.Specs(reg), *sets)
		},
		DetectFacts: func(context.Context) (*gpu.Facts, error) { return nil, gpu.ErrNoGPU },
		Registry:    reg,
		Getenv: func(k string) string {
			switch k {
			case "PATH":
				return os.Getenv("PATH")
			case node.ClaimsDirEnv:
				return filepath.Join(dir, "claims")
			case node.StateDirsEnv:
				return filepath.Join(dir, "state-dirs")
			}
			return ""
		},
	}
	return &node.Recipe{File: path, Sets: *sets, StateDir: state, Insecure: true, Kept: &node.Kept{}, Deps: deps,
		NewLogger: func(io.Writer) *log.Logger { return log.New(io.Discard) }}
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
