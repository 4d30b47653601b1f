package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/test/fakehub"
)

// TestHFCacheLayout: layout hf-cache writes the repository as huggingface_hub's cache
// holds it (its documented structure, which its reader, try_to_load_from_cache and
// snapshot_download with local_files_only, walks): models--ORG--NAME/blobs/ETAG with each
// file's bytes (ETAG: the sha256 of an LFS file, the git blob sha1 of a file kept in git),
// snapshots/COMMIT/PATH a relative symlink to ../../blobs/ETAG, refs/main holding the
// commit and nothing else; a re-run is a no-op, and a removed link is restored from its
// blob without a download.
func TestHFCacheLayout(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, fakehub.Options{})
	// A file in a sub-folder, and two files with the same content (one blob).
	for name, data := range map[string]string{"sub/extra.json": `{"x":1}`, "copy.json": `{"x":1}`} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(fx.src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(fx.src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := fx.hub.Reindex(); err != nil {
		t.Fatal(err)
	}
	spec := fx.hfSpec("main")
	spec.HF.Include = nil
	spec.Layout = LayoutHFCache
	if err := fx.step(t, spec, nil).Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	commit := fx.hub.Commit()
	repoDir := filepath.Join(fx.dest, "models--org--model")
	top, _ := os.ReadDir(repoDir)
	var names []string
	for _, e := range top {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "blobs refs snapshots" {
		t.Errorf("%s holds %v, want blobs refs snapshots", repoDir, names)
	}
	if b, err := os.ReadFile(filepath.Join(repoDir, "refs", "main")); err != nil || string(b) != commit {
		t.Errorf("refs/main = %q, %v; want the commit, no newline", b, err)
	}
	snap := filepath.Join(repoDir, "snapshots", commit)
	blobsUsed := map[string]bool{}
	var listed []string
	err := filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(snap, p)
		listed = append(listed, rel)
		if d.Type()&fs.ModeSymlink == 0 {
			t.Errorf("snapshot entry %s is not a symlink", rel)
			return nil
		}
		target, _ := os.Readlink(p)
		if filepath.IsAbs(target) {
			t.Errorf("%s links to an absolute path %s", rel, target)
		}
		want := strings.Repeat("../", 2+strings.Count(rel, "/")) + "blobs/"
		if !strings.HasPrefix(target, want) {
			t.Errorf("%s -> %s, want %sETAG", rel, target, want)
		}
		name := strings.TrimPrefix(target, want)
		blobsUsed[name] = true
		data, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("reading %s through its link: %v", rel, err)
			return nil
		}
		src, _ := os.ReadFile(filepath.Join(fx.src, rel))
		if string(data) != string(src) {
			t.Errorf("%s differs from the source", rel)
		}
		sum := sha256.Sum256(data)
		if name != hex.EncodeToString(sum[:]) && name != fakehub.GitBlobSHA1(data) {
			t.Errorf("%s: blob %s is neither its sha256 nor its git sha1", rel, name)
		}
		if len(data) >= 16<<10 && name != hex.EncodeToString(sum[:]) {
			t.Errorf("LFS file %s: blob %s, want its sha256", rel, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(listed)
	var want []string
	_ = filepath.WalkDir(fx.src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(fx.src, p)
			want = append(want, rel)
		}
		return err
	})
	sort.Strings(want)
	if strings.Join(listed, ",") != strings.Join(want, ",") {
		t.Errorf("snapshot holds %v, want %v", listed, want)
	}
	if _, err := os.Lstat(filepath.Join(snap, ".sglprov")); err == nil {
		t.Errorf("the downloader's work folder is left in the snapshot")
	}
	blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if len(blobs) != len(blobsUsed) || len(blobs) != len(listed)-1 {
		t.Errorf("%d blobs for %d files (two alike) and %d distinct links", len(blobs), len(listed), len(blobsUsed))
	}
	// Re-run: intact, nothing fetched.
	ok, why, err := fx.step(t, spec, nil).Intact(ctx, fx.env)
	if !ok || err != nil {
		t.Fatalf("Intact after the run = %v %q %v", ok, why, err)
	}
	// A removed link comes back from its blob, with no request for the file.
	if err := os.Remove(filepath.Join(snap, "config.json")); err != nil {
		t.Fatal(err)
	}
	fx.hub.ResetCounters()
	if err := fx.step(t, spec, nil).Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	if n := fx.hub.FileRequests(); n != 0 {
		t.Errorf("%d file requests to restore a link whose blob was there", n)
	}
	if fi, err := os.Lstat(filepath.Join(snap, "config.json")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("config.json not linked again: %v", err)
	}
}
