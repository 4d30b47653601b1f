package sglprov

import (
	"bufio"
	"go/build"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// mapEntries reads the package map of docs/DESIGN.md's Architecture section: the fenced
// block after the heading, one entry per line that starts at its first column: its first
// word, and the next ones while a word ends with a comma ("demo/, bench/" is two),
// trailing slashes dropped.
func mapEntries(doc string) ([]string, error) {
	_, after, ok := strings.Cut(doc, "\n## Architecture\n")
	if !ok {
		return nil, fs.ErrNotExist
	}
	_, block, ok := strings.Cut(after, "\n```\n")
	if !ok {
		return nil, fs.ErrNotExist
	}
	block, _, _ = strings.Cut(block, "\n```")
	var out []string
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == ' ' {
			continue
		}
		for _, f := range strings.Fields(line) {
			name, more := strings.CutSuffix(f, ",")
			out = append(out, strings.TrimSuffix(name, "/"))
			if !more {
				break
			}
		}
	}
	return out, sc.Err()
}

// treePackages returns the folders below root that hold Go files (testdata, hidden and
// tool-module folders left out), relative to root.
func treePackages(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != root {
			name := d.Name()
			if name == "testdata" || name == "bin" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own (tools/registry)
			}
		}
		if _, err := build.ImportDir(p, 0); err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		if rel, err := filepath.Rel(root, p); err == nil && rel != "." {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

var placeholder = regexp.MustCompile(`^<[a-z]+>$`)

// named reports whether the map names pkg. Under pkg/ and internal/ each package has an
// entry of its own ("pkg/steps/<kind>" stands for each step kind); elsewhere (test/,
// bench/, cmd/) an entry names its folder and what is below it, such as a fake's cmd/.
func named(entries []string, pkg string) bool {
	strict := strings.HasPrefix(pkg, "pkg/") || strings.HasPrefix(pkg, "internal/")
	for _, e := range entries {
		if e == pkg || !strict && strings.HasPrefix(pkg, e+"/") {
			return true
		}
		if strings.Contains(e, "<") && matchPattern(e, pkg) {
			return true
		}
	}
	return false
}

func matchPattern(pattern, pkg string) bool {
	pe, ke := strings.Split(pattern, "/"), strings.Split(pkg, "/")
	if len(pe) != len(ke) {
		return false
	}
	for i := range pe {
		if pe[i] != ke[i] && !placeholder.MatchString(pe[i]) {
			return false
		}
	}
	return true
}

// The package map of docs/DESIGN.md names every package of the tree, and names nothing
// that is not there.
func TestDesignMapNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := mapEntries(string(doc))
	if err != nil || len(entries) == 0 {
		t.Fatalf("reading the package map of docs/DESIGN.md: %v (%d entries)", err, len(entries))
	}
	pkgs, err := treePackages(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 50 {
		t.Fatalf("found only %d packages in the tree: %v", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		if !named(entries, p) {
			t.Errorf("docs/DESIGN.md's package map does not name %s/: add a line `%s/  what it holds` to the map in ## Architecture", p, p)
		}
	}
	for _, e := range entries {
		if strings.Contains(e, "<") {
			if !slices.ContainsFunc(pkgs, func(p string) bool { return matchPattern(e, p) }) {
				t.Errorf("docs/DESIGN.md's package map names %s/, which matches no package", e)
			}
			continue
		}
		if _, err := os.Stat(filepath.FromSlash(path.Clean(e))); err != nil {
			t.Errorf("docs/DESIGN.md's package map names %s, which is not in the tree", e)
		}
	}
}

// The check itself: a package left off the map, and an entry for one that is gone, are
// both found; a step kind matches the placeholder entry; a fake's command is covered by
// the fake's entry, a library's sub-package is not covered by the library's.
func TestDesignMapCheck(t *testing.T) {
	doc := "intro\n## Architecture\n\ntext\n\n```\npkg/a/          one\n                continued/ not an entry\npkg/steps/<kind>/ kinds\ndemo/, test/fake/  two\n```\nafter\n"
	entries, err := mapEntries(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(entries, " "), "pkg/a pkg/steps/<kind> demo test/fake"; got != want {
		t.Fatalf("entries %q, want %q", got, want)
	}
	for pkg, want := range map[string]bool{
		"pkg/a": true, "pkg/a/sub": false, "pkg/b": false, "pkg/steps/build": true, "pkg/steps/build/x": false,
		"test/fake/cmd/fake": true, "test/other": false, "internal/x": false,
	} {
		if got := named(entries, pkg); got != want {
			t.Errorf("named(%s) = %v, want %v", pkg, got, want)
		}
	}
}
