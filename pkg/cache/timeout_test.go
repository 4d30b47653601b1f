package cache_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
)

// hangingServer accepts connections on loopback and, per mode, never answers ("silent")
// or sends a manifest's headers and then nothing of its body ("headers").
func hangingServer(t *testing.T, mode string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if mode == "headers" {
				go func() {
					buf := make([]byte, 64<<10)
					_, _ = c.Read(buf)
					_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: 1000\r\n\r\n{"))
				}()
			}
		}
	}()
	return l.Addr().String()
}

// within runs f and fails the test when it takes longer than d.
func within(t *testing.T, d time.Duration, what string, f func()) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still waits after %s", what, d)
	}
	return time.Since(start)
}

// TestRegistryThatNeverAnswers: a registry that accepts connections and sends nothing,
// or a manifest's headers and no body, costs one timeout: the error says so, and every
// later call fails at once instead of waiting again (a plan or apply with many steps and
// files is not stalled one timeout per step or file).
func TestRegistryThatNeverAnswers(t *testing.T) {
	for _, mode := range []string{"silent", "headers"} {
		t.Run(mode, func(t *testing.T) {
			addr := hangingServer(t, mode)
			c, err := cache.New(cache.Config{Repository: addr + "/fleet/sglprov", Push: true}, cache.Options{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			tag := strings.Repeat("ab", 32)
			var lerr error
			d := within(t, 20*time.Second, "Lookup", func() { _, lerr = c.Lookup(ctx, tag) })
			if lerr == nil || !strings.Contains(lerr.Error(), "did not answer within 1s") {
				t.Fatalf("Lookup = %v, want an error that says the registry did not answer", lerr)
			}
			if d > 5*time.Second {
				t.Errorf("Lookup took %s with a timeout of 1s", d)
			}
			d = within(t, 20*time.Second, "the calls after it", func() {
				if _, err := c.Lookup(ctx, tag); err == nil || !strings.Contains(err.Error(), "did not answer") {
					t.Errorf("second Lookup = %v", err)
				}
				if _, err := c.HasBlob(ctx, strings.Repeat("cd", 32)); err == nil || !strings.Contains(err.Error(), "did not answer") {
					t.Errorf("HasBlob = %v", err)
				}
				f := cache.File{Name: "x", Path: "/dev/null", Size: 0, SHA256: strings.Repeat("e3", 32)}
				if _, err := c.Push(ctx, tag, cache.KindBuild, []byte(`{}`), []cache.File{f}); err == nil || !strings.Contains(err.Error(), "did not answer") {
					t.Errorf("Push = %v", err)
				}
			})
			if d > 500*time.Millisecond {
				t.Errorf("the calls after a registry did not answer took %s; they should fail at once", d)
			}
		})
	}
}

// TestCredentialHintOnlyOn401: the `docker login` fix is named for a registry that wants
// credentials, not for any error whose text has "401" in it (a blob digest often does).
func TestCredentialHintOnlyOn401(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "storage backend down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, err := cache.New(cache.Config{Repository: strings.TrimPrefix(srv.URL, "http://") + "/fleet/sglprov"}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sha := "06930e5a614adbadc01bedf1edbe75ba9131edb33fc645ab3824017dad660674"
	_, err = c.HasBlob(context.Background(), sha)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("HasBlob = %v, want the 503", err)
	}
	if strings.Contains(err.Error(), "docker login") {
		t.Errorf("a 503 is said to want credentials: %v", err)
	}
}

// TestPushToARegistryThatStopsReading: a registry that takes an upload and then reads no
// more of a chunk (its storage hangs) fails the push after the timeout without progress,
// instead of blocking the write, and the run, for ever.
func TestPushToARegistryThatStopsReading(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodHead:
			w.WriteHeader(http.StatusNotFound)
		case http.MethodPost:
			w.Header().Set("Location", "/v2/fleet/sglprov/blobs/uploads/u1")
			w.WriteHeader(http.StatusAccepted)
		case http.MethodPatch:
			select { // reads nothing of the body
			case <-release:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handlers
	f := writeRandom(t, filepath.Join(t.TempDir(), "w.bin"), 48<<20)
	c, err := cache.New(cache.Config{Repository: strings.TrimPrefix(srv.URL, "http://") + "/fleet/sglprov", Push: true},
		cache.Options{Timeout: time.Second, ChunkSize: 48 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var perr error
	d := within(t, 30*time.Second, "Push", func() {
		_, perr = c.Push(context.Background(), strings.Repeat("ab", 32), cache.KindBuild, []byte(`{}`), []cache.File{f})
	})
	if perr == nil || !strings.Contains(perr.Error(), "took no byte") {
		t.Errorf("Push = %v, want an error that says the registry took no byte", perr)
	}
	if d > 15*time.Second {
		t.Errorf("Push took %s with a timeout of 1s", d)
	}
}
