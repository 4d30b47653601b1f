package recipe_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// manyVars returns a valid recipe with n vars, each but the first using the first.
func manyVars(n int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: sglprov/v1\nname: many\nvars:\n  v0: \"value\"\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  v%d: \"{{ .vars.v0 }}-%d\"\n", i, i)
	}
	b.WriteString("steps:\n  - name: s\n    command: {argv: [\"true\", \"{{ .vars.v0 }}\"]}\n")
	return []byte(b.String())
}

func TestLoadRefusesRecipeOverSizeLimit(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	data := manyVars(100)
	if err := os.WriteFile(small, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := recipe.Load(small, testKinds(), nil); err != nil {
		t.Fatalf("a small recipe: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	pad := strings.Repeat("# padding to pass the size limit\n", recipe.MaxSize/32)
	if err := os.WriteFile(big, append(data, pad...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := recipe.Load(big, testKinds(), nil)
	if !errors.Is(err, safefile.ErrTooLarge) || !strings.Contains(err.Error(), "limit of 1048576") {
		t.Fatalf("Load of a recipe over %d bytes = %v, want the size limit named", recipe.MaxSize, err)
	}
}

func TestLoadRefusesFIFOWithoutBlocking(t *testing.T) {
	p := filepath.Join(t.TempDir(), "recipe.yaml")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan error, 1)
	go func() { _, err := recipe.Load(p, testKinds(), nil); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), "FIFO") {
			t.Fatalf("Load of a FIFO = %v, want it refused as a FIFO", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load of a FIFO blocked")
	}
}

// BenchmarkParseVars parses recipes with 2,500 and 10,000 vars (4x as many) and
// renders them: time per op grows about 4x when validation is linear in the vars.
func BenchmarkParseVars(b *testing.B) {
	for _, n := range []int{2500, 10000} {
		data := manyVars(n)
		b.Run(fmt.Sprintf("vars=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				r, err := recipe.Parse("many.yaml", data, testKinds(), nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.NewData(nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// doubling returns a recipe whose var vN is v(N-1) twice over, from a 10-byte v0: a few
// lines that render to 10 * 2^n bytes. refs is how many scalars of its step use v(n-1).
func doubling(n, refs int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: sglprov/v1\nname: doubling\nvars:\n  v0: \"0123456789\"\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  v%d: \"{{ .vars.v%d }}{{ .vars.v%d }}\"\n", i, i-1, i-1)
	}
	b.WriteString("steps:\n  - name: s\n    command:\n      argv:\n        - \"true\"\n")
	for i := 0; i < refs; i++ {
		fmt.Fprintf(&b, "        - \"{{ .vars.v%d }}\"\n", n-1)
	}
	return []byte(b.String())
}

// Vars that use each other many times over cannot make more than MaxRendered bytes: the
// var (or step) that goes over is named, where before a 2 KiB recipe of 40 such vars
// rendered until memory ran out.
func TestRenderIsBounded(t *testing.T) {
	// 22 vars render to 40 MiB in all: over the limit, and still small enough to render
	// without one.
	r, err := recipe.Parse("doubling.yaml", doubling(22, 1), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewData(nil); err == nil || !strings.Contains(err.Error(), "vars.v20: the templates render to more than 16 MiB") {
		t.Fatalf("NewData = %v, want vars.v20 named over the limit", err)
	}

	// 16 vars render to 640 KiB; a step that uses the last one 60 times makes 19 MiB.
	r, err = recipe.Parse("doubling.yaml", doubling(16, 60), testKinds(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.NewData(nil)
	if err != nil {
		t.Fatalf("NewData of 640 KiB of vars: %v", err)
	}
	var spec struct {
		Argv []string `yaml:"argv"`
	}
	if err := r.Steps[0].Render(d, &spec); err == nil || !strings.Contains(err.Error(), "more than 16 MiB") {
		t.Fatalf("Render = %v, want the limit named", err)
	}
}
