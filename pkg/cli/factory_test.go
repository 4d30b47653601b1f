package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/steps"
)

// countingFacts is a Factory whose facts are the fixture's, counting the reads.
func countingFacts(t *testing.T, fresh bool) (*Factory, *atomic.Int32) {
	t.Helper()
	facts, err := gpu.LoadFixture(filepath.Join("..", "..", "testdata", "gpu", "h200-x1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	return &Factory{Fresh: fresh, DetectFacts: func(context.Context, func(string) string) (*gpu.Facts, error) {
		n.Add(1)
		return facts, nil
	}}, &n
}

// TestFactoryFactsOnce: a command reads the host's GPU facts once, however many of its
// parts need them; the daemon (Fresh) reads them at every use.
func TestFactoryFactsOnce(t *testing.T) {
	f, n := countingFacts(t, false)
	for range 3 {
		if facts, err := f.Facts(context.Background(), os.Getenv); err != nil || facts.Count() != 1 {
			t.Fatalf("Facts = %v, %v", facts, err)
		}
	}
	if n.Load() != 1 {
		t.Errorf("facts read %d times, want once", n.Load())
	}
	fresh, m := countingFacts(t, true)
	for range 3 {
		_, _ = fresh.Facts(context.Background(), os.Getenv)
	}
	if m.Load() != 3 {
		t.Errorf("fresh facts read %d times, want 3", m.Load())
	}
}

// TestApplyReadsFactsOnce: one apply of a recipe that needs the GPU facts (its preflight,
// its engine, its metrics textfile) reads them once, through the command's factory.
func TestApplyReadsFactsOnce(t *testing.T) {
	dir := t.TempDir()
	recipe := writeRecipe(t, dir, `apiVersion: sglprov/v1
name: once
requires:
  gpu: {min_count: 1}
steps:
  - name: hello
    command: {argv: [sh, -c, "echo {{ .gpu.count }}"]}
`)
	f, n := countingFacts(t, false)
	var stderr strings.Builder
	code := Main([]string{"sglprov", "apply", "-f", recipe, "--state-dir", filepath.Join(dir, "st"), "--textfile", filepath.Join(dir, "m.prom")},
		IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }, Factory: f})
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if n.Load() != 1 {
		t.Errorf("facts read %d times in one apply, want once", n.Load())
	}
}

// TestBuildEngineKeepsShortHost: the engine's inputs are the command's flags and the
// factory's facts; what building it found of the host comes back beside it, not in the
// flags' struct: a host that falls short gets its engine and its problems from
// node.Recipe.BuildEngine (plan shows them), and an exit-4 error from Recipe.Engine (apply).
func TestBuildEngineKeepsShortHost(t *testing.T) {
	dir := t.TempDir()
	path := writeRecipe(t, dir, `apiVersion: sglprov/v1
name: short
requires:
  gpu: {min_count: 8}
steps:
  - name: hello
    command: {argv: ["true"]}
`)
	f, _ := countingFacts(t, false)
	stdio := IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }, Factory: f}
	c := &recipeFlags{recipe: path, stateDir: filepath.Join(dir, "st"), logLevel: "info", logFormat: "text"}
	n, err := c.node(stdio)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.BuildEngine(context.Background(), nil, nil, true)
	if err != nil || b.Engine == nil || b.Err != nil {
		t.Fatalf("BuildEngine on a short host: %v, %v", err, b.Err)
	}
	b.Engine.Close()
	if host := b.Host; len(host.Short) != 1 || host.Short[0].Message != "host has 1 GPU; this recipe needs at least 8" {
		t.Errorf("short = %q", host.Short)
	}
	if _, err := n.Engine(context.Background(), nil); !errors.Is(err, exitcode.ErrHost) {
		t.Errorf("Engine on a short host: %v, want ErrHost", err)
	}
}

// TestFactoryBuildsOnceAndSwaps: one apply (its engine, its metrics textfile) parses the
// recipe once, and the recipe's parser and the engine's constructor are the factory's: a
// test's own ones are the ones the command calls.
func TestFactoryBuildsOnceAndSwaps(t *testing.T) {
	dir := t.TempDir()
	path := writeRecipe(t, dir, `apiVersion: sglprov/v1
name: swapped
steps:
  - name: hello
    command: {argv: ["true"]}
`)
	var loads, engines atomic.Int32
	f := &Factory{
		LoadRecipe: func(p string, sets []string) (*recipe.Recipe, error) {
			loads.Add(1)
			return recipe.Load(p, steps.Specs(steps.Registry()), sets)
		},
		NewEngine: func(o engine.Options) (*engine.Engine, error) {
			engines.Add(1)
			return engine.New(o)
		},
	}
	var stderr strings.Builder
	code := Main([]string{"sglprov", "apply", "-f", path, "--state-dir", filepath.Join(dir, "st"), "--textfile", filepath.Join(dir, "m.prom")},
		IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }, Factory: f})
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if loads.Load() != 1 {
		t.Errorf("recipe parsed %d times in one apply, want once", loads.Load())
	}
	if engines.Load() == 0 {
		t.Errorf("the factory's engine constructor was not called")
	}
	// The daemon (Fresh) reads the recipe again at every use: it watches it change.
	fresh := &Factory{Fresh: true, LoadRecipe: f.LoadRecipe}
	before := loads.Load()
	for range 2 {
		if _, err := fresh.Recipe(path, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	if loads.Load()-before != 2 {
		t.Errorf("fresh factory parsed the recipe %d times in 2 uses, want 2", loads.Load()-before)
	}
}

// TestFactoryManagerIsTheServiceStepsManager: the service manager is one seam. The
// factory's constructor makes the manager the service step installs its unit with (apply)
// and the one remove stops it with; no step makes its own.
func TestFactoryManagerIsTheServiceStepsManager(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	path := writeRecipe(t, dir, `apiVersion: sglprov/v1
name: managed
steps:
  - name: service
    systemd:
      unit: sglang-managed.service
      needs_commands: []
      command: [/usr/bin/python3, -m, sglang.launch_server]
      model_path: /models/m
`)
	var calls []service.Options
	var mu sync.Mutex
	f := &Factory{NewManager: func(ctx context.Context, o service.Options) (service.Manager, error) {
		mu.Lock()
		calls = append(calls, o)
		mu.Unlock()
		return service.New(ctx, o)
	}}
	run := func(args ...string) {
		t.Helper()
		var stderr strings.Builder
		args = append([]string{"sglprov"}, append(args, "-f", path, "--root", root, "--state-dir", filepath.Join(dir, "st"))...)
		if code := Main(args, IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }, Factory: f}); code != 0 {
			t.Fatalf("%v: exit %d; stderr:\n%s", args[1], code, stderr.String())
		}
	}
	run("apply")
	mu.Lock()
	applied := len(calls)
	mu.Unlock()
	if applied == 0 || calls[0].Root != root {
		t.Fatalf("apply made its service manager without the factory: calls %+v", calls)
	}
	unit := filepath.Join(root, "etc", "systemd", "system", "sglang-managed.service")
	if _, err := os.Stat(unit); err != nil {
		t.Fatalf("apply installed no unit: %v", err)
	}
	run("remove")
	if len(calls) == applied {
		t.Errorf("remove made its service manager without the factory")
	}
	if _, err := os.Stat(unit); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("remove left the unit: %v", err)
	}
}
