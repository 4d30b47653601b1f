package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cli"
)

// A FIFO given as the recipe, the series or a patch is refused with exit 2 and a message
// that names it; nothing waits for a writer.
func TestFIFORecipeFilesExit2(t *testing.T) {
	const recipe = `apiVersion: sglprov/v1
name: fifo
steps:
  - name: p
    patch: {dir: tree, series: patches/series}
`
	cases := []struct {
		name string
		fifo string // which file is a FIFO
		cmd  string
	}{
		{"recipe validate", "r.yaml", "validate"},
		{"recipe apply", "r.yaml", "apply"},
		{"series", "patches/series", "apply"},
		{"patch", "patches/one.patch", "apply"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"tree", "patches"} {
				if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			files := map[string]string{
				"r.yaml":            recipe,
				"patches/series":    "one.patch\n",
				"patches/one.patch": "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+x\n",
			}
			for name, text := range files {
				p := filepath.Join(dir, name)
				if name == c.fifo {
					if err := syscall.Mkfifo(p, 0o644); err != nil {
						t.Skip("mkfifo:", err)
					}
					continue
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var stderr bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- cli.Main([]string{"sglprov", c.cmd, "-f", filepath.Join(dir, "r.yaml"), "--state-dir", filepath.Join(dir, "state")},
					cli.IO{Stdout: &bytes.Buffer{}, Stderr: &stderr, Getenv: func(string) string { return "" }})
			}()
			select {
			case code := <-done:
				if code != 2 || !strings.Contains(stderr.String(), "is a FIFO, not a regular file") {
					t.Fatalf("exit %d, want 2 naming the FIFO; stderr:\n%s", code, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("sglprov waited on the FIFO")
			}
		})
	}
}

// A recipe, or a patch it names, that another user owns is refused with exit 2 naming the
// owner; --insecure-permissions accepts both.
func TestRecipeFilesOfAnotherUserExit2(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	const recipe = `apiVersion: sglprov/v1
name: owners
steps:
  - name: p
    patch: {dir: tree, series: patches/series}
`
	for _, owned := range []string{"r.yaml", "patches/one.patch"} {
		t.Run(owned, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{
				"r.yaml":            strings.Replace(recipe, "dir: tree", "dir: "+filepath.Join(dir, "tree"), 1),
				"patches/series":    "one.patch\n",
				"patches/one.patch": "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-x\n+y\n",
				"tree/f":            "x\n",
			}
			for name, text := range files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chown(filepath.Join(dir, owned), 4242, 4242); err != nil {
				t.Fatal(err)
			}
			run := func(extra ...string) (int, string) {
				var stderr bytes.Buffer
				args := append([]string{"sglprov", "apply", "-f", filepath.Join(dir, "r.yaml"), "--state-dir", filepath.Join(dir, "state")}, extra...)
				code := cli.Main(args, cli.IO{Stdout: &bytes.Buffer{}, Stderr: &stderr, Getenv: func(string) string { return "" }})
				return code, stderr.String()
			}
			if code, stderr := run(); code != 2 || !strings.Contains(stderr, "is owned by uid 4242, not by root or this user") {
				t.Fatalf("exit %d, want 2 naming the owner; stderr:\n%s", code, stderr)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "tree/f")); string(b) != "x\n" {
				t.Errorf("the tree changed: %q", b)
			}
			if code, stderr := run("--insecure-permissions"); code != 0 {
				t.Fatalf("--insecure-permissions: exit %d; stderr:\n%s", code, stderr)
			}
		})
	}
}
