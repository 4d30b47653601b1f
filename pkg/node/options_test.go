package node_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

// TestRecipeOptions: an apply's engine options come from the node's recipe: the recipe's
// folder, root and state dir, the node-wide claims (moved by SGLPROV_GPU_CLAIMS_DIR), every
// GPU of the host for a recipe that loads no facts (none under --root), and the drain
// around a switch only for a recipe with hooks.
func TestRecipeOptions(t *testing.T) {
	facts, err := gpu.LoadFixture(filepath.Join("..", "..", "testdata", "gpu", "h200-x1.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg := steps.Registry()
	n := &node.Recipe{File: filepath.Join(dir, "r.yaml"), StateDir: filepath.Join(dir, "st"), Insecure: true,
		Deps: &node.Deps{Registry: reg,
			Getenv: func(k string) string {
				if k == node.ClaimsDirEnv {
					return "/claims"
				}
				return ""
			},
			DetectFacts: func(context.Context) (*gpu.Facts, error) { return facts, nil }}}
	parse := func(text string) *recipe.Recipe {
		t.Helper()
		r, err := recipe.Parse("r.yaml", []byte(text), steps.Specs(reg), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	plain := parse("apiVersion: sglprov/v1\nname: p\nsteps:\n  - name: s\n    command: {argv: [\"true\"]}\n")
	o, err := n.Options(context.Background(), plain, nil, log.New(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.RecipeDir != dir || o.StateDir != n.StateDir || o.ClaimsDir != "/claims" || !o.InsecurePermissions || o.Recipe != plain ||
		!slices.Equal(o.NodeGPUs, facts.IDs()) || o.Drain != nil || o.Undrain != nil || o.Cache != nil {
		t.Errorf("Options = dir %q state %q claims %q insecure %v gpus %v drain %v", o.RecipeDir, o.StateDir, o.ClaimsDir, o.InsecurePermissions, o.NodeGPUs, o.Drain != nil)
	}
	n.Root = filepath.Join(dir, "root")
	if o, err = n.Options(context.Background(), plain, nil, log.New(nil)); err != nil || o.NodeGPUs != nil || o.Root != n.Root {
		t.Errorf("under --root: GPUs %v, root %q, %v; want none", o.NodeGPUs, o.Root, err)
	}
	hooked := parse("apiVersion: sglprov/v1\nname: h\non_unhealthy: {argv: [\"true\"]}\nsteps:\n  - name: s\n    command: {argv: [\"true\"]}\n")
	if o, err = n.Options(context.Background(), hooked, facts, log.New(nil)); err != nil || o.Drain == nil || o.Undrain == nil || o.NodeGPUs != nil {
		t.Errorf("a recipe with hooks: drain %v, undrain %v, GPUs %v, %v", o.Drain != nil, o.Undrain != nil, o.NodeGPUs, err)
	}
}
