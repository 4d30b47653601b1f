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
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
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
	defer n.Kept.Set(nil)
	// An apply as the apply command runs one: its engine closed at the end.
	apply := func(set ...string) {
		t.Helper()
		sets = set
		rep, e, err := n.Apply(context.Background(), node.ApplyOptions{})
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

// inPlaceRecipe builds a tree at SRC (in place, or in a generation: %[1]s is the recipe's
// generations line) and serves the fake server from it; the server answers garbage while
// SRC/broken exists.
const inPlaceRecipe = `apiVersion: sglprov/v1
name: ip
%[1]s
steps:
  - name: build
    command: {argv: [sh, -c, "mkdir -p %[2]s && echo {{ .vars.pin }} > %[2]s/pin"], creates: ["%[2]s/pin"]}
  - name: service
    needs: [build]
    systemd:
      unit: sglang-ip.service
      manager: exec
      needs_commands: []
      command: [%[3]s, -m, sglang.launch_server]
      env: {%[4]s: "1"}
      model_path: /models/ip
      port: "%[5]d"
      args: [--fake-broken-while, "%[2]s/broken"]
  - name: smoke
    needs: [service]
    smoke:
      url: "http://127.0.0.1:%[5]d"
      ready_timeout: 20s
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
vars:
  pin: "1"
`

// inPlaceNode is a node provisioned in place at src, then migrated to generations: its
// first generation serves and the in-place tree is moved aside.
type inPlaceNode struct {
	n                *node.Recipe
	rb               *node.Rollback
	src, gens, state string
	record           string
	gen1             string
	apply            func(set ...string) (*engine.Report, error)
}

func newInPlaceNode(t *testing.T) *inPlaceNode {
	t.Helper()
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
	dir, host, gens, state := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	p := &inPlaceNode{src: filepath.Join(host, "opt", "sglang"), gens: gens, state: state,
		record: filepath.Join(state, "generations", "ip.json")}
	text := func(generations string) string {
		return fmt.Sprintf(inPlaceRecipe, generations, p.src, bin, fakeServerEnv, port)
	}
	path := writeRecipe(t, dir, text("generations: off"))
	var sets []string
	p.n = realRecipe(t, path, state, &sets)
	t.Cleanup(func() { p.n.Kept.Set(nil) })
	p.rb = &node.Rollback{Recipe: p.n}
	// An apply as the apply command runs one: its engine closed at the end.
	p.apply = func(set ...string) (*engine.Report, error) {
		sets = set
		rep, e, err := p.n.Apply(context.Background(), node.ApplyOptions{})
		if e != nil {
			e.Close()
		}
		if err != nil {
			return rep, fmt.Errorf("apply %v: %w\n%s", set, err, rep.Failures(20))
		}
		return rep, nil
	}
	if _, err := p.apply(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(p.src); err != nil || !fi.IsDir() {
		t.Fatalf("in place: %s is %v, %v; want a folder", p.src, fi, err)
	}
	writeRecipe(t, dir, text(fmt.Sprintf("generations: {dir: %s, keep: 2, roots: [%s]}", gens, p.src)))
	if _, err := p.apply(); err != nil {
		t.Fatal(err)
	}
	p.gen1 = p.open(t).Serving()
	if p.gen1 == "" {
		t.Fatal("no generation serves after the migration")
	}
	p.wantLink(t, filepath.Join(gens, "ip", p.gen1, "sglang"))
	return p
}

func (p *inPlaceNode) open(t *testing.T) *generation.Store {
	t.Helper()
	s, err := generation.Open(filepath.Join(p.gens, "ip"), p.record, 2)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (p *inPlaceNode) aside() string { return p.src + ".sglprov-inplace" }

func (p *inPlaceNode) wantLink(t *testing.T, want string) {
	t.Helper()
	if got, err := os.Readlink(p.src); err != nil || got != want {
		t.Errorf("%s links to %q (%v), want %s", p.src, got, err, want)
	}
}

func (p *inPlaceNode) touch(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "broken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The previous-generation rung on a node migrated from an in-place tree: when the first
// generation, the only one, stops passing, the rung points the root back at the tree moved
// aside, restarts the unit with the recipe's paths as written and gates it; on a pass the
// record says the in-place tree serves (no generation, no current link) and the tree is
// as it was. From there the rung goes to the generation; the next apply tries the
// recipe's generation through the gate and, when it passes, links the root to it again.
func TestRollBackToInPlaceTree(t *testing.T) {
	p := newInPlaceNode(t)
	pin := filepath.Join(p.aside(), "pin")
	before, err := os.ReadFile(pin)
	if err != nil {
		t.Fatalf("the in-place tree was not moved aside: %v", err)
	}
	p.touch(t, filepath.Join(p.gens, "ip", p.gen1, "sglang"))
	if err := p.rb.RollBack(context.Background()); err != nil {
		t.Fatalf("RollBack: %v", err)
	}
	s := p.open(t)
	if s.Serving() != "" || s.InPlaceServing() == nil || s.InPlaceServing().From != p.gen1 {
		t.Errorf("after the roll back: serving %q, in place %+v; want none, in place from %s", s.Serving(), s.InPlaceServing(), p.gen1)
	}
	p.wantLink(t, p.aside())
	if _, err := os.Lstat(filepath.Join(p.gens, "ip", generation.CurrentLink)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the current link is still there (%v) while the in-place tree serves", err)
	}
	if after, err := os.ReadFile(pin); err != nil || string(after) != string(before) {
		t.Errorf("the in-place tree changed: pin %q (%v), was %q", after, err, before)
	}
	if err := gateRecipe(context.Background(), p.rb); err != nil {
		t.Errorf("the in-place server does not pass the gate: %v", err)
	}
	// The unit that serves is the recipe's as written: it reads the tree through the root.
	unit, err := os.ReadFile(filepath.Join(p.state, "units", "sglang-ip.service"))
	if err != nil || !strings.Contains(string(unit), filepath.Join(p.src, "broken")) || strings.Contains(string(unit), p.gens) {
		t.Errorf("the unit that serves (%v):\n%s\nwant the paths as written, under %s", err, unit, p.src)
	}
	if p.n.Info(context.Background(), mustLoad(t, p.n)).Generation != "" {
		t.Errorf("node_info names a generation while the in-place tree serves")
	}

	// Plan says so.
	e, err := p.n.Engine(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := e.Plan(context.Background())
	e.Close()
	if err != nil || plan.Generation == nil || !strings.Contains(plan.Generation.String(), "the in-place tree moved aside serves") {
		t.Errorf("plan's generation: %q (%v), want the in-place tree named", plan.Generation, err)
	}

	// The next apply: the recipe's generation is kept (nothing is built again) and goes
	// through the gate; while it fails, the in-place tree is restored and keeps serving.
	rep, err := p.apply()
	if err == nil || !strings.Contains(err.Error(), "the last-known-good unit of the in-place tree was restored and passed") {
		t.Fatalf("apply with the generation still broken: %v, want a failed gate", err)
	}
	if rep == nil || rep.Generation == nil || !strings.Contains(rep.Generation.Note, "the in-place tree moved aside serves") {
		t.Errorf("the failed apply's generation note: %+v", rep)
	}
	p.wantLink(t, p.aside())
	if s := p.open(t); s.Serving() != "" || s.InPlaceServing() == nil {
		t.Errorf("after a failed apply: serving %q, in place %+v; want the in-place tree", s.Serving(), s.InPlaceServing())
	}
	if err := gateRecipe(context.Background(), p.rb); err != nil {
		t.Errorf("after a failed apply the in-place server does not pass the gate: %v", err)
	}
	// Once the generation is good again, the apply puts it back and the root links to it.
	if err := os.Remove(filepath.Join(p.gens, "ip", p.gen1, "sglang", "broken")); err != nil {
		t.Fatal(err)
	}
	rep, err = p.apply()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation == nil || !strings.Contains(rep.Generation.Note, "(was the in-place tree moved aside)") {
		t.Errorf("the apply's generation note: %+v", rep.Generation)
	}
	if s := p.open(t); s.Serving() != p.gen1 || s.InPlaceServing() != nil {
		t.Errorf("after the apply: serving %q, in place %+v; want %s", s.Serving(), s.InPlaceServing(), p.gen1)
	}
	p.wantLink(t, filepath.Join(p.gens, "ip", p.gen1, "sglang"))
	if after, err := os.ReadFile(pin); err != nil || string(after) != string(before) {
		t.Errorf("the in-place tree changed: pin %q (%v), was %q", after, err, before)
	}
}

// A roll back to an in-place tree that fails its gate puts the root's link back at the
// generation, whose unit comes back and passes; the record still names the generation; the
// tree moved aside stays. With the tree gone there is nothing to go back to.
func TestRollBackToBrokenInPlaceTree(t *testing.T) {
	p := newInPlaceNode(t)
	genTree := filepath.Join(p.gens, "ip", p.gen1, "sglang")
	p.touch(t, p.aside())
	err := p.rb.RollBack(context.Background())
	if err == nil || errors.Is(err, daemon.ErrNotAvailable) || !strings.Contains(err.Error(), "failed the gate") {
		t.Fatalf("roll back to a broken in-place tree: %v, want a failed gate", err)
	}
	p.wantLink(t, genTree)
	if s := p.open(t); s.Serving() != p.gen1 || s.InPlaceServing() != nil {
		t.Errorf("after a failed roll back: serving %q, in place %+v; want %s", s.Serving(), s.InPlaceServing(), p.gen1)
	}
	if err := gateRecipe(context.Background(), p.rb); err != nil {
		t.Errorf("after a failed roll back the generation's server does not pass: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.aside(), "pin")); err != nil {
		t.Errorf("the in-place tree: %v", err)
	}
	// A link someone else changed is left alone: the rung does not touch it.
	other := t.TempDir()
	if err := os.Remove(p.src); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, p.src); err != nil {
		t.Fatal(err)
	}
	if err := p.rb.RollBack(context.Background()); err == nil || !strings.Contains(err.Error(), "left as it is") {
		t.Errorf("roll back with the link changed: %v, want it refused", err)
	}
	p.wantLink(t, other)
	// With the moved-aside tree gone, the rung is not available.
	if err := os.Rename(p.aside(), p.aside()+".gone"); err != nil {
		t.Fatal(err)
	}
	if err := p.rb.RollBack(context.Background()); !errors.Is(err, daemon.ErrNotAvailable) {
		t.Errorf("roll back with the in-place tree gone: %v, want not available", err)
	}
}

func mustLoad(t *testing.T, n *node.Recipe) *recipe.Recipe {
	t.Helper()
	r, err := n.Load()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
