package cache_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// frontOf is a proxy in front of the registry at addr; a request that hijack takes (it
// returns true) is answered by it instead.
func frontOf(t *testing.T, addr string, hijack func(w http.ResponseWriter, r *http.Request) bool) string {
	t.Helper()
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hijack(w, r) {
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A registry that answers a 9-byte blob with 200, no Content-Length and a body that never
// ends: the pull stops at the 10th byte with a clear error, and leaves no file.
func TestPullOfABlobWithoutAnEnd(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/endless", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "nine")
	if err := os.WriteFile(src, []byte("123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	sha, size, err := cache.FileSHA256(src)
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("e", 64)
	if _, err := pusher.Push(ctx, tag, cache.KindBuild, []byte(`{}`), []cache.File{{Name: "nine", Path: src, Size: size, SHA256: sha}}); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	front := frontOf(t, reg.Addr, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/sha256:"+sha) {
			return false
		}
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("123456789"))
		chunk := make([]byte, 32<<10)
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				break
			}
			w.(http.Flusher).Flush()
		}
		return true
	})
	puller, err := cache.New(cache.Config{Repository: front + "/fleet/endless"}, cache.Options{Fetch: fetch.Options{RetryWait: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := puller.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatalf("Lookup = %v, %v", a, err)
	}
	dir := t.TempDir()
	start := time.Now()
	err = puller.Pull(ctx, a, dir)
	var tl *fetch.TooLongError
	if !errors.As(err, &tl) || !strings.Contains(err.Error(), "more than the 9 bytes") {
		t.Fatalf("Pull = %v, want the blob refused at its 10th byte", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the pull took %s", d)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the pull left %v in its folder", ents)
	}
	if n := sent.Load(); n > 64<<20 {
		t.Errorf("%d bytes were taken from the endless blob", n)
	}
}
