package patch

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
)

// The series shipped under patches/ parse, name only paths inside the tree, and change at
// least one file each.
func TestShippedSeriesParse(t *testing.T) {
	all, err := filepath.Glob("../../../patches/*/*/series")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Skip("no shipped series")
	}
	for _, path := range all {
		t.Run(path, func(t *testing.T) {
			s, err := loadSeries(path, readFile)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Patches) == 0 {
				t.Fatal("the series names no patch")
			}
			for _, p := range s.Patches {
				for _, f := range p.Files {
					if len(f.TextFragments) == 0 && f.OldMode == f.NewMode && !f.IsNew && !f.IsDelete && !f.IsRename {
						t.Errorf("%s: %s changes nothing", p.Name, fileName(f))
					}
				}
			}
		})
	}
}

// With SGLPROV_SGLANG_TREE naming a folder that holds the upstream files the shipped SGLang
// series touches (as they are at the pinned commit), the series applies to a copy of it,
// and a second run finds it already applied. `make verify-patches` fetches those files and
// runs this test with them (SGLPROV_SGLANG_SERIES: the one series they are for).
func TestShippedSGLangSeriesApplies(t *testing.T) {
	src := os.Getenv("SGLPROV_SGLANG_TREE")
	if src == "" {
		t.Skip("SGLPROV_SGLANG_TREE not set: make verify-patches fetches the pinned files and runs this test")
	}
	series, err := filepath.Glob("../../../patches/sglang/*/series")
	if one := os.Getenv("SGLPROV_SGLANG_SERIES"); one != "" {
		series, err = []string{one}, nil
	}
	if err != nil || len(series) == 0 {
		t.Fatalf("no shipped sglang series: %v", err)
	}
	for _, path := range series {
		t.Run(path, func(t *testing.T) {
			tree := filepath.Join(t.TempDir(), "sglang")
			copyTree(t, src, tree)
			abs, err := filepath.Abs(path)
			if err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			env := engine.NewTestEnv(t.TempDir(), &log)
			step, err := New("sm120-patches", Spec{Dir: tree, Series: abs})
			if err != nil {
				t.Fatal(err)
			}
			if err := step.Run(context.Background(), env); err != nil {
				t.Fatalf("first run: %v", err)
			}
			if err := step.Run(context.Background(), env); err != nil {
				t.Fatalf("second run: %v", err)
			}
			if !strings.Contains(log.String(), "patch already applied") {
				t.Errorf("second run did not find the series applied:\n%s", log.String())
			}
			t.Log(log.String())
		})
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readFile reads a series or patch from disk, as a recipe beside it would.
func readFile(p string) ([]byte, string, error) {
	b, err := os.ReadFile(p)
	return b, p, err
}
