package cache_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// blobStore serves a registry's storage folder as an object store behind signed URLs
// would: on its own host, refusing (and failing the test on) any request that carries an
// Authorization header, as S3 refuses a signed URL sent with one. It counts what it served.
type blobStore struct {
	t      *testing.T
	mu     sync.Mutex
	root   string         // the registry's storage folder
	served map[string]int // method -> requests answered
}

func (b *blobStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a := r.Header.Get("Authorization"); a != "" {
		b.t.Errorf("the blob store got Authorization %q on %s %s", a[:min(len(a), 12)]+"…", r.Method, r.URL.Path)
		http.Error(w, "only one auth mechanism allowed", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.served[r.Method]++
	root := b.root
	b.mu.Unlock()
	http.FileServer(http.Dir(root)).ServeHTTP(w, r)
}

// TestRegistryThatRedirectsBlobs: a registry that wants credentials and answers every blob
// GET and HEAD with a 307 to another host (distribution's redirect middleware, as with S3
// storage): push, lookup (the config), HasBlob and pull all follow the redirect, and the
// other host never sees the registry's credentials.
func TestRegistryThatRedirectsBlobs(t *testing.T) {
	store := &blobStore{t: t, served: map[string]int{}}
	srv := httptest.NewServer(store)
	defer srv.Close()
	reg := ociregistry.StartWithT(t, ociregistry.Options{Htpasswd: htpasswd, RedirectTo: srv.URL})
	store.mu.Lock()
	store.root = filepath.Join(reg.Dir, "storage")
	store.mu.Unlock()

	cfgDir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg.Addr, auth)), 0o600); err != nil {
		t.Fatal(err)
	}
	opt := cache.Options{Getenv: env(map[string]string{"DOCKER_CONFIG": cfgDir}), ChunkSize: 1 << 20}
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/redirect", Push: true}, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := t.TempDir()
	files := []cache.File{writeRandom(t, filepath.Join(src, "a.bin"), 3<<20), writeRandom(t, filepath.Join(src, "b.bin"), 1000)}
	tag := strings.Repeat("7", 64)
	meta := []byte(`{"step":"redirect"}`)
	if _, err := c.Push(ctx, tag, cache.KindBuild, meta, files); err != nil {
		t.Fatalf("Push: %v", err)
	}
	// A second push finds every blob there (HEAD, redirected) and sends none again.
	if _, err := c.Push(ctx, strings.Repeat("8", 64), cache.KindBuild, meta, files); err != nil {
		t.Fatalf("second Push: %v", err)
	}
	a, err := c.Lookup(ctx, tag)
	if err != nil || a == nil || !bytes.Equal(a.Meta, meta) {
		t.Fatalf("Lookup = %+v, %v; want the artifact with its config", a, err)
	}
	for _, f := range files {
		ok, err := c.HasBlob(ctx, f.SHA256)
		if err != nil || !ok {
			t.Errorf("HasBlob(%s) = %v, %v", f.Name, ok, err)
		}
	}
	if ok, err := c.HasBlob(ctx, strings.Repeat("0", 64)); err != nil || ok {
		t.Errorf("HasBlob of a blob that is not there = %v, %v", ok, err)
	}
	dir := t.TempDir()
	if err := c.Pull(ctx, a, dir); err != nil {
		t.Fatalf("Pull: %v", err)
	}
	for _, f := range files {
		if err := fetch.VerifyFile(filepath.Join(dir, f.Name), fetch.File{Size: f.Size, SHA256: f.SHA256}); err != nil {
			t.Error(err)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.served[http.MethodHead] == 0 || store.served[http.MethodGet] == 0 {
		t.Errorf("the blob store served %v: the registry did not redirect, the test proves nothing", store.served)
	}
}
