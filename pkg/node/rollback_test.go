package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/node"
)

// rollbackRecipe builds a "generation" (a folder with a marker) and serves the fake server
// from it; the server answers garbage while GEN/broken exists.
const rollbackRecipe = `apiVersion: sglprov/v1
name: rb
generations: {dir: %s, keep: 2}
vars:
  pin: "1"
steps:
  - name: build
    command: {argv: [sh, -c, "mkdir -p {{ .generation.dir }} && echo {{ .vars.pin }} > {{ .generation.dir }}/pin"], creates: ["{{ .generation.dir }}/pin"]}
  - name: service
    needs: [build]
    systemd:
      unit: sglang-rb.service
      manager: exec
      needs_commands: []
      command: [%s, -m, sglang.launch_server]
      env: {%s: "1"}
      model_path: /models/rb
      port: "%d"
      args: [--fake-broken-while, "{{ .generation.dir }}/broken"]
  - name: smoke
    needs: [service]
    smoke:
      url: "http://127.0.0.1:%d"
      ready_timeout: 20s
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
`

// The previous-generation rung: with no earlier generation it is not available; once a
// second generation serves and answers garbage, the rung puts the first one back (its unit,
// pointing into its folder), gates it, and records it as serving; when the earlier one is
// broken too, the rung fails and the unit that served before runs again.
func TestRollBackToPreviousGeneration(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, gens, state := t.TempDir(), t.TempDir(), t.TempDir()
	path := writeRecipe(t, dir, fmt.Sprintf(rollbackRecipe, gens, bin, fakeServerEnv, port, port))
	var sets []string
	n := realRecipe(t, path, state, &sets)
	defer n.Held.Set(nil)
	// An apply as the apply command runs one: its engine closed at the end.
	apply := func(set ...string) {
		t.Helper()
		sets = set
		rep, e, err := n.Apply(context.Background())
		if e != nil {
			e.Close()
		}
		if err != nil {
			t.Fatalf("apply %v: %v\n%s", set, err, rep.Failures(20))
		}
	}
	rb := &node.Rollback{Recipe: n}

	apply()
	if err := rb.RollBack(context.Background()); !errors.Is(err, daemon.ErrNotAvailable) {
		t.Fatalf("one generation: RollBack = %v, want not available", err)
	}
	record := filepath.Join(state, "generations", "rb.json")
	open := func() *generation.Store {
		t.Helper()
		s, err := generation.Open(filepath.Join(gens, "rb"), record, 2)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	g1 := open().Serving()
	apply("pin=2")
	// The daemon runs the recipe as it was applied: sets stays pin=2.
	g2 := open().Serving()
	if g1 == "" || g2 == g1 {
		t.Fatalf("generations %q and %q", g1, g2)
	}
	// The serving generation breaks: the rung goes back to g1 and gates it.
	if err := os.WriteFile(filepath.Join(gens, "rb", g2, "broken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rb.RollBack(context.Background()); err != nil {
		t.Fatalf("RollBack: %v", err)
	}
	s := open()
	if s.Serving() != g1 || s.Previous() != g2 {
		t.Errorf("after the roll back: serving %s, previous %s; want %s, %s", s.Serving(), s.Previous(), g1, g2)
	}
	if link, _ := os.Readlink(filepath.Join(gens, "rb", generation.CurrentLink)); link != g1 {
		t.Errorf("current link %q, want %s", link, g1)
	}
	if err := gateRecipe(context.Background(), rb); err != nil {
		t.Errorf("the rolled-back server does not pass the gate: %v", err)
	}
	// The node_info metric names the generation that serves, not the last apply's.
	r, err := n.Load()
	if err != nil {
		t.Fatal(err)
	}
	if info := n.Info(context.Background(), r); info.Generation != g1 {
		t.Errorf("node_info generation = %q after the roll back, want %s", info.Generation, g1)
	}

	// Now g1 serves and g2 is broken: going "back" to g2 fails its gate, and g1's unit,
	// the one that served, runs again and still passes.
	if err := rb.RollBack(context.Background()); err == nil || errors.Is(err, daemon.ErrNotAvailable) ||
		!strings.Contains(err.Error(), "failed the gate") {
		t.Fatalf("roll back to a broken generation: %v, want a failed gate", err)
	}
	if s := open(); s.Serving() != g1 {
		t.Errorf("after a failed roll back: serving %s, want %s", s.Serving(), g1)
	}
	if err := gateRecipe(context.Background(), rb); err != nil {
		t.Errorf("after a failed roll back the server that served does not pass: %v", err)
	}
}

// gateRecipe runs the recipe's whole gate against the server as it runs.
func gateRecipe(ctx context.Context, g *node.Rollback) error {
	cfg, err := g.Recipe.Gate(ctx, 0)
	if err != nil {
		return err
	}
	return node.Regate(ctx, nil, cfg)
}
