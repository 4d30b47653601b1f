package engine_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/sglprov/sglprov/"

// layer is one floor of pkg/ and what it must never reach, directly or through another
// package. Paths are relative to the module; "pkg/steps/..." is pkg/steps and every
// package below it.
type layer struct {
	name  string
	match []string // the packages of the layer; none: every pkg/ package no other layer has
	never []string // what they must not import
	// seams are named seams the layer may import although never matches them: the walk
	// neither judges them nor goes through them (the kinds' registry pkg/steps, which
	// alone imports the kinds).
	seams []string
}

// layers are the rules, stated once: data flows recipe, plan, run, state; the libraries
// stay usable on their own; each layer above them reaches only down. What the step kinds
// and the node share on the engine's types (the gated switch, the gate's configuration)
// is a step library, never a kind: the node and the command line reach the kinds only
// through the registry, the daemon not at all.
var layers = []layer{
	{name: "library", never: []string{"pkg/engine", "pkg/steps/...", "pkg/daemon", "pkg/node", "pkg/cli"}},
	{name: "engine", match: []string{"pkg/engine", "pkg/reclaim"}, never: []string{"pkg/steps/...", "pkg/daemon", "pkg/node", "pkg/cli"}},
	{name: "step library", match: []string{"pkg/gatedswitch", "pkg/gatespec"}, never: []string{"pkg/steps/...", "pkg/daemon", "pkg/node", "pkg/cli"}},
	{name: "step kind", match: []string{"pkg/steps/..."}, never: []string{"pkg/daemon", "pkg/node", "pkg/cli"}},
	{name: "daemon", match: []string{"pkg/daemon"}, never: []string{"pkg/steps/...", "pkg/node", "pkg/cli"}},
	{name: "node", match: []string{"pkg/node"}, never: []string{"pkg/steps/...", "pkg/cli"}, seams: []string{"pkg/steps"}},
	{name: "command line", match: []string{"pkg/cli"}, never: []string{"pkg/steps/..."}, seams: []string{"pkg/steps"}},
}

func matches(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

// layerOf returns the layer of pkg: the first whose match names it, else the libraries'.
func layerOf(pkg string) layer {
	for _, l := range layers {
		for _, m := range l.match {
			if matches(m, pkg) {
				return l
			}
		}
	}
	return layers[0]
}

// packagesUnder returns the packages (folders with Go files, testdata left out) under
// root/dir, relative to root.
func packagesUnder(t *testing.T, root, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return filepath.SkipDir
		}
		if _, err := build.ImportDir(p, 0); err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatalf("listing the packages under %s: %v", dir, err)
	}
	sort.Strings(out)
	return out
}

// layerViolations walks the imports of every package under root/pkg (a module laid out as
// sglprov's) and returns one line per forbidden edge, with the chain that reaches it.
func layerViolations(t *testing.T, root string) (checked []string, bad []string) {
	t.Helper()
	for _, pkg := range packagesUnder(t, root, "pkg") {
		l := layerOf(pkg)
		checked = append(checked, l.name+" "+pkg)
		seen := map[string]bool{}
		var walk func(path string, chain []string)
		walk = func(path string, chain []string) {
			if seen[path] {
				return
			}
			seen[path] = true
			if path != pkg && slices.Contains(l.seams, path) {
				return
			}
			if path != pkg {
				for _, f := range l.never {
					if matches(f, path) {
						bad = append(bad, l.name+" "+pkg+" imports "+path+" (through "+strings.Join(chain, " -> ")+")")
						return
					}
				}
			}
			p, err := build.ImportDir(filepath.Join(root, path), 0)
			if err != nil {
				t.Fatalf("reading %s: %v", path, err)
			}
			for _, imp := range p.Imports {
				if rel, ok := strings.CutPrefix(imp, module); ok {
					walk(rel, append(chain[:len(chain):len(chain)], rel))
				}
			}
		}
		walk(pkg, []string{pkg})
	}
	return checked, bad
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// The libraries never import the engine, a step kind, the daemon, the node layer or the
// command line, directly or through one another, and each layer above reaches only down
// (the rules: layers). Every package under pkg/ is checked, found in the tree: one added
// tomorrow is a library, and checked, without being listed anywhere.
func TestLibrariesDoNotImportTheEngine(t *testing.T) {
	checked, bad := layerViolations(t, repoRoot())
	for _, b := range bad {
		t.Error(b)
	}
	// The tree's own packages are all there: those once left off a hand-kept list among them.
	for _, want := range []string{"library pkg/switchover", "library pkg/generation", "library pkg/sglargs",
		"library pkg/procgroup", "library pkg/switchover/fakeunits", "engine pkg/engine", "step kind pkg/steps/stepexec",
		"step library pkg/gatedswitch", "step library pkg/gatespec",
		"daemon pkg/daemon", "node pkg/node", "command line pkg/cli"} {
		if !slices.Contains(checked, want) {
			t.Errorf("%q was not checked; checked: %v", want, checked)
		}
	}
}

// A package the rules have never heard of is a library and is held to the libraries'
// rule, directly and through another library; a step kind may import the engine.
func TestLayerRulesCheckAPackageNoOneListed(t *testing.T) {
	root := t.TempDir()
	write := func(dir, src string) {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "x.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pkg/engine", "package engine\n")
	write("pkg/brandnew", "package brandnew\nimport _ \""+module+"pkg/middle\"\n")
	write("pkg/middle", "package middle\nimport _ \""+module+"pkg/engine\"\n")
	write("pkg/steps/newkind", "package newkind\nimport _ \""+module+"pkg/engine\"\n")
	write("pkg/steps", "package steps\nimport _ \""+module+"pkg/steps/newkind\"\n")
	write("pkg/cli", "package cli\nimport _ \""+module+"pkg/steps\"\n")
	write("pkg/node", "package node\nimport _ \""+module+"pkg/cli\"\n")
	write("pkg/leaf/testdata/x", "package x\nimport _ \""+module+"pkg/engine\"\n")
	_, bad := layerViolations(t, root)
	want := []string{
		"library pkg/brandnew imports pkg/engine (through pkg/brandnew -> pkg/middle -> pkg/engine)",
		"library pkg/middle imports pkg/engine (through pkg/middle -> pkg/engine)",
		"node pkg/node imports pkg/cli (through pkg/node -> pkg/cli)",
	}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}

// The node and the command line reach a step kind only through the kinds' registry
// (pkg/steps), the daemon not even through it; a step library may import the engine but
// no kind. Each upper package is found in the tree and checked, directly and through
// another package.
func TestLayerRulesKeepStepKindsBehindTheRegistry(t *testing.T) {
	root := t.TempDir()
	write := func(dir string, imports ...string) {
		src := "package " + filepath.Base(dir) + "\n"
		for _, imp := range imports {
			src += "import _ \"" + module + imp + "\"\n"
		}
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "x.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pkg/engine")
	write("pkg/steps/smoke", "pkg/engine", "pkg/gatedswitch")
	write("pkg/steps", "pkg/steps/smoke")
	write("pkg/gatedswitch", "pkg/engine")
	write("pkg/gatespec", "pkg/steps/smoke")
	write("pkg/cli", "pkg/steps", "pkg/node", "pkg/gatedswitch")
	write("pkg/node", "pkg/gatedswitch", "pkg/steps/smoke")
	write("pkg/daemon", "pkg/steps")
	_, bad := layerViolations(t, root)
	want := []string{
		"daemon pkg/daemon imports pkg/steps (through pkg/daemon -> pkg/steps)",
		"step library pkg/gatespec imports pkg/steps/smoke (through pkg/gatespec -> pkg/steps/smoke)",
		"command line pkg/cli imports pkg/steps/smoke (through pkg/cli -> pkg/node -> pkg/steps/smoke)",
		"node pkg/node imports pkg/steps/smoke (through pkg/node -> pkg/steps/smoke)",
	}
	sort.Strings(bad)
	sort.Strings(want)
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
