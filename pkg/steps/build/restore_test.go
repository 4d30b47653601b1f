package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// pushFiles pushes files (name -> content and mode) as a build artifact tagged tag.
func pushFiles(t *testing.T, c *cache.Registry, tag string, files map[string]string, modes map[string]os.FileMode) {
	t.Helper()
	src := t.TempDir()
	var fs []cache.File
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(src, strings.ReplaceAll(name, "/", "_"))
		if err := os.WriteFile(p, []byte(files[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(files[name]))
		fs = append(fs, cache.File{Name: name, Path: p, Size: int64(len(files[name])), SHA256: hex.EncodeToString(sum[:]), Mode: modes[name]})
	}
	if _, err := c.Push(context.Background(), tag, cache.KindBuild, []byte(`{}`), fs); err != nil {
		t.Fatal(err)
	}
}

// retag copies the manifest tagged from to the tag to, with edit applied to its text, as
// a pusher that writes its own manifests could.
func retag(t *testing.T, addr, repo, from, to string, edit func(string) string) {
	t.Helper()
	const mt = "application/vnd.oci.image.manifest.v1+json"
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v2/"+repo+"/manifests/"+from, nil)
	req.Header.Set("Accept", mt)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	edited := edit(string(b))
	if edited == string(b) {
		t.Fatalf("the edit changed nothing in %s", b)
	}
	req, _ = http.NewRequest(http.MethodPut, "http://"+addr+"/v2/"+repo+"/manifests/"+to, strings.NewReader(edited))
	req.Header.Set("Content-Type", mt)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT manifest: %s", resp.Status)
	}
}

// TestRestoredModesAreBounded: a restored output has the mode the pushing node's file
// had, bounded: no group or other write, no setuid, setgid or sticky bit (an annotation
// of 6777 gives 0755, 0666 gives 0644), and the owner executes what anyone could.
func TestRestoredModesAreBounded(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	const repo = "fleet/modes"
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/" + repo, Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"dist/a.whl": "a", "dist/b.whl": "b", "dist/c.whl": "c", "dist/d.whl": "d", "dist/e.whl": "e"}
	modes := map[string]os.FileMode{"dist/a.whl": 0o777, "dist/b.whl": 0o666, "dist/c.whl": 0o700, "dist/d.whl": 0o640, "dist/e.whl": 0o755}
	pushFiles(t, c, "pushed", files, modes)
	tag := strings.Repeat("6", 64)
	retag(t, reg.Addr, repo, "pushed", tag, func(m string) string {
		// e.whl's annotation becomes 6777: setuid, setgid and world-writable.
		return strings.Replace(m, `"dist/e.whl","org.sglprov.mode":"0755"`, `"dist/e.whl","org.sglprov.mode":"6777"`, 1)
	})
	dir := t.TempDir()
	s := newStep(t, Spec{Dir: dir, Argv: []string{"false"}, Outputs: []string{"dist/*.whl"}})
	env, _, _ := testEnv(t)
	if _, ok, err := s.Restore(ctx, env, engine.CacheSlot{Cache: c, Tag: tag}); err != nil || !ok {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	for name, want := range map[string]os.FileMode{"dist/a.whl": 0o755, "dist/b.whl": 0o644, "dist/c.whl": 0o700, "dist/d.whl": 0o640, "dist/e.whl": 0o755} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky); got != want {
			t.Errorf("%s restored with mode %v, want %v", name, got, want)
		}
	}
}

// treeOf lists every entry under dir with its content (files) or "/" (folders).
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel] = "/"
			return nil
		}
		b, _ := os.ReadFile(p)
		out[rel] = string(b)
		return nil
	})
	return out
}

// TestRestoreLeavesTheTreeAsItWas: an artifact that lacks one of the step's outputs says
// "the artifact lacks X" before a byte is pulled; a restore that fails half way (a folder
// it needs is a file in the tree) puts back what it replaced. Either way the tree is as
// it was before the restore, and the step runs instead.
func TestRestoreLeavesTheTreeAsItWas(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/lacks", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("lacks an output", func(t *testing.T) {
		tag := strings.Repeat("4", 64)
		pushFiles(t, c, tag, map[string]string{"dist/k.whl": "new"}, nil)
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "dist"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "dist", "k.whl"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := treeOf(t, dir)
		s := newStep(t, Spec{Dir: dir, Argv: []string{"false"}, Outputs: []string{"dist/*.whl", "lib/*.so"}})
		env, _, _ := testEnv(t)
		_, ok, err := s.Restore(ctx, env, engine.CacheSlot{Cache: c, Tag: tag})
		if ok || err == nil || !strings.Contains(err.Error(), "lacks lib/*.so") {
			t.Fatalf("Restore = %v, %v; want \"the artifact lacks lib/*.so\"", ok, err)
		}
		if after := treeOf(t, dir); !equalTrees(before, after) {
			t.Errorf("the tree changed: %v, was %v", after, before)
		}
	})
	t.Run("fails half way", func(t *testing.T) {
		tag := strings.Repeat("3", 64)
		pushFiles(t, c, tag, map[string]string{"dist/a.whl": "new a", "dist/sub/b.whl": "new b"}, nil)
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "dist"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string]string{"dist/a.whl": "old a", "dist/sub": "a file where a folder is wanted"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		before := treeOf(t, dir)
		s := newStep(t, Spec{Dir: dir, Argv: []string{"false"}, Outputs: []string{"dist/*.whl", "dist/sub/*.whl"}})
		env, _, _ := testEnv(t)
		_, ok, err := s.Restore(ctx, env, engine.CacheSlot{Cache: c, Tag: tag})
		if ok || err == nil || !strings.Contains(err.Error(), "left as it was") {
			t.Fatalf("Restore = %v, %v; want a failure that left the tree as it was", ok, err)
		}
		if after := treeOf(t, dir); !equalTrees(before, after) {
			t.Errorf("the tree changed: %v, was %v", after, before)
		}
	})
}

func equalTrees(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
