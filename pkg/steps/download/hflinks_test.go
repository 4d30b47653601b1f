package download

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/test/fakehub"
)

// listTree returns every path under dir, relative, with each file's content, so that a
// folder can be compared before and after.
func listTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		} else {
			out[rel] = fi.Mode().Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHFCacheRefusesLinkedFolders: with layout hf-cache, a blobs/, snapshots/ or refs/
// folder (or the repository's folder itself) replaced by a symbolic link to a folder
// outside dest is refused before anything is written: the error names the link and the
// fix, and the folder it points to is left exactly as it was.
func TestHFCacheRefusesLinkedFolders(t *testing.T) {
	for _, linked := range []string{"models--org--model", "models--org--model/blobs", "models--org--model/snapshots", "models--org--model/refs"} {
		t.Run(filepath.Base(linked), func(t *testing.T) {
			fx := newFixture(t, fakehub.Options{})
			spec := fx.hfSpec("main")
			spec.Layout = LayoutHFCache
			outside := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.MkdirAll(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, "keep.txt"), []byte("not sglprov's"), 0o644); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(fx.dest, filepath.FromSlash(linked))
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			before := listTree(t, outside)
			err := fx.step(t, spec, nil).Run(context.Background(), fx.env)
			if err == nil || !strings.Contains(err.Error(), link+" is a symbolic link") || !strings.Contains(err.Error(), "replace the link with a real folder") {
				t.Fatalf("Run = %v, want an error naming the link %s and the fix", err, link)
			}
			after := listTree(t, outside)
			if len(after) != len(before) {
				t.Errorf("the folder the link points to changed: %v, was %v", after, before)
			}
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s changed", k)
				}
			}
		})
	}
}
