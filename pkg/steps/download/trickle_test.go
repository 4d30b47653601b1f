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
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/test/fakehub"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// TestRegistryThatTrickles: a registry that answers every weight blob with its headers and
// then a byte every 200 ms (never a stall) gives way to the origin after one window below
// cache.min_rate: every file comes from the hub, right, and the log says why once.
func TestRegistryThatTrickles(t *testing.T) {
	ctx := context.Background()
	reg := ociregistry.StartT(t)
	fx := newFixture(t, fakehub.Options{})
	spec := fx.hfSpec(fx.hub.Commit())
	tag := strings.Repeat("6c", 32)
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/trickle", Push: true}, cache.Options{})
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
	weights := map[string]int{}
	for _, name := range fx.srcFiles(t) {
		b, err := os.ReadFile(filepath.Join(fx.src, name))
		if err != nil {
			t.Fatal(err)
		}
		weights[sum(b)] = len(b)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Addr})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, d, ok := strings.Cut(r.URL.Path, "/blobs/sha256:")
		if !ok || r.Method != http.MethodGet || weights[d] == 0 {
			proxy.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(weights[d]))
		w.WriteHeader(http.StatusOK)
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte{0}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(200 * time.Millisecond)
		}
	}))
	defer front.Close()
	var mu sync.Mutex
	var regLog strings.Builder
	puller, err := cache.New(cache.Config{Repository: strings.TrimPrefix(front.URL, "http://") + "/fleet/trickle"}, cache.Options{
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
	specB.StallTimeout, specB.FilesAtOnce = "60s", 1
	b := fx.step(t, specB, nil)
	b.minRateWindow = 2 * time.Second
	start := time.Now()
	if err := b.RunCached(ctx, env, engine.CacheSlot{Cache: puller, Tag: tag}); err != nil {
		t.Fatalf("node B: %v\n%s", err, log)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %s: the trickle was waited on", took)
	}
	for _, name := range fx.srcFiles(t) {
		want, _ := os.ReadFile(filepath.Join(fx.src, name))
		got, err := os.ReadFile(filepath.Join(specB.Dest, name))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s differs from the origin's (%v)", name, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(regLog.String(), "below cache.min_rate"); n != 1 {
		t.Errorf("the registry's log says why it was given up %d times, want once:\n%s", n, regLog.String())
	}
}
