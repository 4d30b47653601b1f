package sglprov

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The limits a reader can hold at once: a source file of at most maxFileLines lines, a
// function (from its func keyword to its closing brace, the closures in it included) of at
// most maxFuncLines.
const (
	maxFileLines = 600
	maxFuncLines = 80
)

// oversized are the files and functions over the limits today, with their size: each may
// shrink, none may grow, and no other may join them. An entry is "path" for a file and
// "path Func" or "path Recv.Method" for a function; one that comes under the limit is
// removed from here.
var oversized = map[string]int{}

// sizeViolations measures every non-test Go file of the module below root (tools/, which
// is a module of its own, other modules, testdata, hidden folders and generated files left
// out) against the limits and allow, the oversized entries allowed. It returns one line
// per file or function that must change: a new offender, an allowed one that grew, one now
// under the limit or gone that is still allowed; and one note per allowed entry that
// shrank but is still over (its entry may come down).
func sizeViolations(root string, allow map[string]int) (bad, notes []string, err error) {
	sizes, err := measure(root)
	if err != nil {
		return nil, nil, err
	}
	for key, n := range sizes {
		limit := maxFuncLines
		if !strings.Contains(key, " ") {
			limit = maxFileLines
		}
		was, allowed := allow[key]
		switch {
		case n <= limit && allowed:
			bad = append(bad, fmt.Sprintf("%s is %d lines now, within the limit of %d: remove it from the allowlist (oversized in size_test.go)", key, n, limit))
		case n <= limit:
		case !allowed:
			bad = append(bad, fmt.Sprintf("%s is %d lines, over the limit of %d: split it (the allowlist holds only what was over the limit already)", key, n, limit))
		case n > was:
			bad = append(bad, fmt.Sprintf("%s grew to %d lines from %d, over the limit of %d: split it rather than let it grow", key, n, was, limit))
		case n < was:
			notes = append(notes, fmt.Sprintf("%s shrank to %d lines from %d (limit %d): its allowlist entry may come down to %d", key, n, was, limit, n))
		}
	}
	for key := range allow {
		if _, ok := sizes[key]; !ok {
			bad = append(bad, fmt.Sprintf("%s is gone: remove it from the allowlist (oversized in size_test.go)", key))
		}
	}
	sort.Strings(bad)
	sort.Strings(notes)
	return bad, notes, nil
}

var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// measure returns the line count of every file it checks (by its slash path relative to
// root) and of each function in it ("path Func", "path Recv.Method").
func measure(root string) (map[string]int, error) {
	sizes := map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return skipDir(root, p, d.Name())
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if generated.Match(src) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		sizes[rel] = bytes.Count(src, []byte("\n"))
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", rel, err)
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				sizes[rel+" "+funcName(fd)] = fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			}
		}
		return nil
	})
	return sizes, err
}

// skipDir says whether the walk leaves folder p (named name) out: tools/, testdata,
// hidden and underscore folders, and any folder that is a module of its own.
func skipDir(root, p, name string) error {
	if p == root {
		return nil
	}
	if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || p == filepath.Join(root, "tools") {
		return filepath.SkipDir
	}
	if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
		return filepath.SkipDir
	}
	return nil
}

// funcName is "Func", or "Recv.Method" for a method (the receiver's type name, without
// pointer or type parameters).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// No source file of the module is over 600 lines and no function over 80, but those
// listed in oversized, none of which may grow.
func TestFilesAndFunctionsStayShort(t *testing.T) {
	bad, notes, err := sizeViolations(".", oversized)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range notes {
		t.Log(n)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// The check itself: a new long file or function fails, an allowed one may stay or shrink
// but not grow, one under the limit must leave the allowlist, and a generated file, a
// test, tools/ and testdata are not measured.
func TestFilesAndFunctionsCheck(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	body := func(n int) string { return strings.Repeat("\tx++\n", n) }
	long := "package a\n" + strings.Repeat("\n", maxFileLines)
	write("a/long.go", long)                                                        // 601 lines, new
	write("a/kept.go", long)                                                        // 601 lines, allowed at 700
	write("a/f.go", "package a\nvar x int\nfunc F() {\n"+body(80)+"}\n")            // F: 82 lines, new
	write("a/t.go", "package a\ntype T struct{}\nfunc (*T) M() {\n"+body(90)+"}\n") // T.M: 92, allowed at 85
	write("a/short.go", "package a\nfunc S() {}\n")                                 // allowed, yet short
	write("a/a_test.go", long)
	write("a/gen.go", "// Code generated by hand; DO NOT EDIT.\n\n"+long)
	write("tools/x/x.go", long)
	write("a/testdata/x.go", long)
	allow := map[string]int{"a/kept.go": 700, "a/t.go T.M": 85, "a/short.go S": 90, "a/gone.go": 700}
	bad, notes, err := sizeViolations(root, allow)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a/f.go F is 82 lines, over the limit of 80: split it",
		"a/gone.go is gone: remove it from the allowlist",
		"a/long.go is 601 lines, over the limit of 600: split it",
		"a/short.go S is 1 lines now, within the limit of 80: remove it from the allowlist",
		"a/t.go T.M grew to 92 lines from 85, over the limit of 80",
	}
	if len(bad) != len(want) {
		t.Fatalf("violations:\n%s\nwant %d, starting:\n%s", strings.Join(bad, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(bad[i], want[i]) {
			t.Errorf("violation %d: %q, want it to start %q", i, bad[i], want[i])
		}
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "a/kept.go shrank to 601 lines from 700") {
		t.Errorf("notes %q, want one for a/kept.go", notes)
	}
}
