package cache_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// pushTwo pushes an artifact of two files to the real registry and returns its tag and
// the files' digests.
func pushTwo(t *testing.T, addr string) (string, map[string]int) {
	t.Helper()
	pusher, err := cache.New(cache.Config{Repository: addr + "/fleet/slow", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := writeRandom(t, filepath.Join(dir, "a.so"), 1<<20)
	b := writeRandom(t, filepath.Join(dir, "b.so"), 1<<20)
	tag := strings.Repeat("5b", 32)
	if _, err := pusher.Push(context.Background(), tag, cache.KindBuild, []byte(`{}`), []cache.File{a, b}); err != nil {
		t.Fatal(err)
	}
	return tag, map[string]int{a.SHA256: int(a.Size), b.SHA256: int(b.Size)}
}

// TestPullGivesWayOnSlowBlobs: a build artifact's pull from a registry whose blob GETs
// hang before their headers, or trickle a byte every 200 ms (a trickle that never
// stalls), fails after one stall timeout (or one min-rate window), not after the ten
// minutes of a file's retry budget: the registry is given up for the run, the log says
// why, and the step then runs from its origin (the engine runs the build on Restore's
// error).
func TestPullGivesWayOnSlowBlobs(t *testing.T) {
	reg := ociregistry.StartT(t)
	tag, blobs := pushTwo(t, reg.Addr)
	for _, tc := range []struct {
		mode, why string
	}{
		{"hang before headers", "sent no byte of a blob (or of its answer's headers) for 1s"},
		{"trickle", "below cache.min_rate (64.0 KiB/s)"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var mu sync.Mutex
			gets := 0
			front := frontOf(t, reg.Addr, func(w http.ResponseWriter, r *http.Request) bool {
				_, d, ok := strings.Cut(r.URL.Path, "/blobs/sha256:")
				if !ok || r.Method != http.MethodGet || blobs[d] == 0 {
					return false
				}
				mu.Lock()
				gets++
				mu.Unlock()
				if tc.mode == "trickle" {
					w.Header().Set("Content-Length", fmt.Sprint(blobs[d]))
					w.WriteHeader(http.StatusOK)
					for r.Context().Err() == nil {
						if _, err := w.Write([]byte{0}); err != nil {
							break
						}
						w.(http.Flusher).Flush()
						time.Sleep(200 * time.Millisecond)
					}
					return true
				}
				<-r.Context().Done()
				return true
			})
			var logMu sync.Mutex
			var logged strings.Builder
			puller, err := cache.New(cache.Config{Repository: front + "/fleet/slow"}, cache.Options{
				Fetch: fetch.Options{StallTimeout: time.Second, MinRateWindow: 2 * time.Second, RetryWait: 10 * time.Millisecond},
				Logf: func(format string, args ...any) {
					logMu.Lock()
					defer logMu.Unlock()
					fmt.Fprintf(&logged, format+"\n", args...)
				}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			a, err := puller.Lookup(ctx, tag)
			if err != nil || a == nil {
				t.Fatalf("Lookup = %v, %v", a, err)
			}
			var perr error
			d := within(t, 60*time.Second, "Pull", func() { perr = puller.Pull(ctx, a, t.TempDir()) })
			if perr == nil || !strings.Contains(perr.Error(), tc.why) {
				t.Fatalf("Pull = %v, want an error saying %q", perr, tc.why)
			}
			if d > 15*time.Second {
				t.Errorf("the pull took %s; one stall timeout or min-rate window is a few seconds", d)
			}
			if err := puller.GaveUp(); err == nil {
				t.Error("the registry is still asked after the pull gave way")
			}
			logMu.Lock()
			defer logMu.Unlock()
			if n := strings.Count(logged.String(), "not asked again in this run"); n != 1 || !strings.Contains(logged.String(), tc.why) {
				t.Errorf("the registry's log says %q, want once why it was given up", logged.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if gets > 4 {
				t.Errorf("the slow blobs were asked for %d times", gets)
			}
		})
	}
}
