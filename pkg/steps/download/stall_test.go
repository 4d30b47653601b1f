package download

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/test/fakehub"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// TestRegistryWhoseBlobsStall: a registry that answers every weight blob's GET with its
// headers and then no byte costs one stall timeout for the whole step, not one per try of
// every file: after the first stall the registry is not asked again, the origin serves
// every file, and the registry's log says so once.
func TestRegistryWhoseBlobsStall(t *testing.T) {
	ctx := context.Background()
	reg := ociregistry.StartT(t)
	fx := newFixture(t, fakehub.Options{})
	spec := fx.hfSpec(fx.hub.Commit())
	tag := strings.Repeat("5a", 32)
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/stall", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	slotA := engine.CacheSlot{Cache: pusher, Tag: tag}
	a := fx.step(t, spec, nil)
	if err := a.RunCached(ctx, fx.env, slotA); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(ctx, fx.env, slotA); err != nil {
		t.Fatal(err)
	}

	// The weights' blobs stall; the manifest, the config and HEADs are answered.
	weights := map[string]int{}
	for _, name := range fx.srcFiles(t) {
		b, err := os.ReadFile(filepath.Join(fx.src, name))
		if err != nil {
			t.Fatal(err)
		}
		weights[sum(b)] = len(b)
	}
	var stalledGets atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Addr})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, d, ok := strings.Cut(r.URL.Path, "/blobs/sha256:")
		if !ok || r.Method != http.MethodGet || weights[d] == 0 {
			proxy.ServeHTTP(w, r)
			return
		}
		stalledGets.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(weights[d]))
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer front.Close()
	var mu sync.Mutex
	var regLog strings.Builder
	puller, err := cache.New(cache.Config{Repository: strings.TrimPrefix(front.URL, "http://") + "/fleet/stall"}, cache.Options{
		Logf: func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(&regLog, format+"\n", args...)
		}})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	log := &syncBuffer{}
	env := engine.NewTestEnv(dir, log)
	env.StepName = "weights"
	specB := spec
	specB.Dest = filepath.Join(dir, "models", "m")
	specB.StallTimeout, specB.Retries, specB.FilesAtOnce = "1s", 1, 1
	if err := fx.step(t, specB, nil).RunCached(ctx, env, engine.CacheSlot{Cache: puller, Tag: tag}); err != nil {
		t.Fatalf("node B: %v\n%s", err, log)
	}
	for _, name := range fx.srcFiles(t) {
		want, _ := os.ReadFile(filepath.Join(fx.src, name))
		got, err := os.ReadFile(filepath.Join(specB.Dest, name))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s differs from the origin's (%v)", name, err)
		}
	}
	if n := stalledGets.Load(); n != 1 {
		t.Errorf("the registry was asked for a stalling blob %d times over %d files; want once", n, len(weights))
	}
	mu.Lock()
	said := strings.Count(regLog.String(), "not asked again in this run")
	mu.Unlock()
	if said != 1 {
		t.Errorf("the registry's log says it is given up on %d times, want once:\n%s", said, regLog.String())
	}
	if n := strings.Count(log.String(), "fetching a file from the cache failed"); n != 1 {
		t.Errorf("the step's log names %d files that fell back, want only the one that stalled:\n%s", n, log)
	}
}
