package node_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/node"
)

// TestValidateWarnsThroughTheRegistry: Validate builds every step and hands back the
// warnings the step kinds give of the recipe (a hub download pinned to a branch), reached
// through the registry, not a kind.
func TestValidateWarnsThroughTheRegistry(t *testing.T) {
	dir := t.TempDir()
	path := writeRecipe(t, dir, `apiVersion: sglprov/v1
name: v
steps:
  - name: weights
    download:
      dest: `+filepath.Join(dir, "m")+`
      hf: {repo: org/model, revision: main}
`)
	n := realRecipe(t, path, filepath.Join(dir, "st"), new([]string))
	v, err := n.Validate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Recipe.Name != "v" || len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], `step weights: revision "main" of org/model is a branch or tag`) {
		t.Errorf("Validate = %+v", v)
	}
}

// TestApplyPlanGC: a plan before the apply runs the step, the apply prints its summary on
// Deps.Stdout and records the run, the plan after skips the step, and GC on the node
// frees nothing it needs.
func TestApplyPlanGC(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "st")
	path := writeRecipe(t, dir, "apiVersion: sglprov/v1\nname: a\nsteps:\n  - name: s\n    command: {argv: [\"true\"]}\n")
	n := realRecipe(t, path, state, new([]string))
	var out bytes.Buffer
	n.Deps.Stdout = &out
	p, pd, err := n.Plan(context.Background(), node.PlanOptions{})
	if err != nil || p == nil || len(p.Steps) != 1 || !p.Steps[0].Run || pd.Running != 0 || pd.Recipe != "a" {
		t.Fatalf("plan before the apply: %+v %+v %v", p, pd, err)
	}
	rep, e, err := n.Apply(context.Background(), node.ApplyOptions{Jobs: 2})
	if e != nil {
		e.Close()
	}
	if err != nil || rep == nil || rep.Result != engine.ResultOK {
		t.Fatalf("apply: %+v %v", rep, err)
	}
	if !strings.Contains(out.String(), "a: ok in ") {
		t.Errorf("no summary on Deps.Stdout: %q", out.String())
	}
	if p, _, err = n.Plan(context.Background(), node.PlanOptions{}); err != nil || p.Steps[0].Run {
		t.Errorf("plan after the apply: %+v %v", p, err)
	}
	out.Reset()
	if err := n.GC(context.Background(), true); err != nil {
		t.Errorf("gc: %v", err)
	}
	if _, err := n.Rollback(context.Background(), ""); !errors.Is(err, node.ErrNoGenerations) {
		t.Errorf("rollback of a recipe without generations: %v, want ErrNoGenerations", err)
	}
}
