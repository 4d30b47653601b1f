package cache_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

func writeRandom(t testing.TB, path string, n int) cache.File {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return cache.File{Name: filepath.Base(path), Path: path, Size: int64(n), SHA256: hex.EncodeToString(s[:]), Mode: 0o755}
}

// failingTransport fails the Nth PATCH after sending part of its body, as a dropped
// connection would.
type failingTransport struct {
	next    http.RoundTripper
	patches atomic.Int32
	failAt  int32
}

func (f *failingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch && f.patches.Add(1) == f.failAt {
		// Let the registry take half of the chunk, then drop the connection.
		half := req.ContentLength / 2
		pr, pw := io.Pipe()
		r2 := req.Clone(req.Context())
		r2.Body = pr
		go func() {
			_, _ = io.CopyN(pw, req.Body, half)
			pw.CloseWithError(errors.New("connection dropped"))
		}()
		resp, err := f.next.RoundTrip(r2)
		if err == nil {
			resp.Body.Close()
		}
		return nil, errors.New("connection dropped")
	}
	return f.next.RoundTrip(req)
}

func TestPushLookupPull(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	src := t.TempDir()
	big := writeRandom(t, filepath.Join(src, "big.bin"), 5<<20+123)
	big.Name = "dist/big.bin"
	small := writeRandom(t, filepath.Join(src, "small.bin"), 1000)
	small.Mode = 0o644

	ft := &failingTransport{next: http.DefaultTransport.(*http.Transport).Clone(), failAt: 3}
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}, cache.Options{Transport: ft, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("ab", 32)
	pushed, err := pusher.Push(ctx, tag, cache.KindBuild, []byte(`{"step":"k"}`), []cache.File{big, small})
	if err != nil {
		t.Fatalf("push with a dropped chunk: %v", err)
	}
	if ft.patches.Load() < 6 {
		t.Errorf("the 5 MiB file went up in %d PATCH requests, want chunks of 1 MiB", ft.patches.Load())
	}

	puller, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := puller.Lookup(ctx, strings.Repeat("cd", 32)); err != nil || a != nil {
		t.Fatalf("lookup of a missing tag: %v, %v; want nil, nil", a, err)
	}
	a, err := puller.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatalf("lookup: %v, %v", a, err)
	}
	if a.Digest != pushed.Digest || a.Kind != cache.KindBuild || string(a.Meta) != `{"step":"k"}` || len(a.Files) != 2 {
		t.Fatalf("looked up %+v, pushed %+v", a, pushed)
	}
	dir := t.TempDir()
	if err := puller.Pull(ctx, a, dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []cache.File{big, small} {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(f.Path)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: pulled bytes differ", f.Name)
		}
		fi, _ := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if fi.Mode().Perm() != f.Mode {
			t.Errorf("%s: mode %v, want %v", f.Name, fi.Mode().Perm(), f.Mode)
		}
	}

	// A pull-only node cannot push.
	if _, err := puller.Push(ctx, tag, cache.KindBuild, nil, nil); err == nil {
		t.Error("a pull-only cache pushed")
	}

	// A pin list without the artifact refuses it.
	pinned, _ := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Digests: []string{"sha256:" + strings.Repeat("0", 64)}}, cache.Options{})
	if _, err := pinned.Lookup(ctx, tag); err == nil || !strings.Contains(err.Error(), "not in cache.digests") {
		t.Errorf("lookup outside the pin list: %v", err)
	}
	pinned, _ = cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Digests: []string{a.Digest}}, cache.Options{})
	if got, err := pinned.Lookup(ctx, tag); err != nil || got == nil {
		t.Errorf("lookup inside the pin list: %v, %v", got, err)
	}

	// Blobs are served by their sha256, with ranges.
	if ok, err := puller.HasBlob(ctx, big.SHA256); !ok || err != nil {
		t.Errorf("HasBlob: %v, %v", ok, err)
	}
	req, _ := http.NewRequest(http.MethodGet, puller.BlobURL(big.SHA256), nil)
	req.Header.Set("Range", "bytes=10-19")
	resp, err := puller.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want, _ := os.ReadFile(big.Path)
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, want[10:20]) {
		t.Errorf("ranged blob GET: %s, %d bytes", resp.Status, len(body))
	}
}

func TestNewRejectsBadRepository(t *testing.T) {
	for _, repo := range []string{"", "host-only", "http://h:5000/x", "h:5000/Upper"} {
		if _, err := cache.New(cache.Config{Repository: repo}, cache.Options{}); err == nil {
			t.Errorf("%q: accepted", repo)
		}
	}
}

// deadTransport fails every request once the Nth PATCH went through: a run killed in the
// middle of a push.
type deadTransport struct {
	next    http.RoundTripper
	patches atomic.Int32
	after   int32
}

func (d *deadTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if d.patches.Load() >= d.after {
		return nil, errors.New("killed")
	}
	if req.Method == http.MethodPatch {
		d.patches.Add(1)
	}
	return d.next.RoundTrip(req)
}

// rangeRecorder records the Content-Range of each PATCH.
type rangeRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	ranges []string
}

func (r *rangeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch {
		r.mu.Lock()
		r.ranges = append(r.ranges, req.Header.Get("Content-Range"))
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// TestPushResumesAfterAKill: a push killed after 3 of 6 chunks continues, in the next
// run, from what the registry holds, and the blob is whole.
func TestPushResumesAfterAKill(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	f := writeRandom(t, filepath.Join(t.TempDir(), "weights.bin"), 6<<20)
	uploads := t.TempDir()
	cfg := cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}
	base := http.DefaultTransport.(*http.Transport).Clone()
	dead := &deadTransport{next: base, after: 3}
	first, err := cache.New(cfg, cache.Options{Transport: dead, ChunkSize: 1 << 20, UploadDir: uploads})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("4", 64)
	if _, err := first.Push(ctx, tag, cache.KindDownload, []byte(`{}`), []cache.File{f}); err == nil {
		t.Fatal("a push through a transport that dies succeeded")
	}
	rec := &rangeRecorder{next: base}
	second, err := cache.New(cfg, cache.Options{Transport: rec, ChunkSize: 1 << 20, UploadDir: uploads})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Push(ctx, tag, cache.KindDownload, []byte(`{}`), []cache.File{f}); err != nil {
		t.Fatalf("the next run's push: %v", err)
	}
	if len(rec.ranges) != 3 || rec.ranges[0] != fmt.Sprintf("%d-%d", 3<<20, 4<<20-1) {
		t.Errorf("the next run sent ranges %q; want the last 3 MiB only", rec.ranges)
	}
	if ents, _ := os.ReadDir(uploads); len(ents) != 0 {
		t.Errorf("%d upload records left after the push completed", len(ents))
	}
	a, err := second.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatal(a, err)
	}
	dir := t.TempDir()
	if err := second.Pull(ctx, a, dir); err != nil {
		t.Fatalf("pulling the resumed blob (its sha256 is checked): %v", err)
	}
}

// stopMidChunk calls stop once the registry has read half of the Nth PATCH's body, as a
// SIGTERM in the middle of a chunk would.
type stopMidChunk struct {
	next    http.RoundTripper
	patches atomic.Int32
	at      int32
	stop    func()
}

type halfwayReader struct {
	io.ReadCloser
	left int64
	stop func()
	once sync.Once
}

func (h *halfwayReader) Read(p []byte) (int, error) {
	n, err := h.ReadCloser.Read(p)
	if h.left -= int64(n); h.left <= 0 {
		h.once.Do(h.stop)
	}
	return n, err
}

func (s *stopMidChunk) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch && s.patches.Add(1) == s.at {
		req.Body = &halfwayReader{ReadCloser: req.Body, left: req.ContentLength / 2, stop: s.stop}
	}
	return s.next.RoundTrip(req)
}

// TestPushStoppedMidChunkResumes: distribution takes an upload's continuation only at the
// offset of its last answer (a chunk cut short makes it refuse and cancel the whole
// upload: "upload resumed at wrong offset"), so a push stopped in the middle of a chunk
// (SIGINT, SIGTERM: the context is cancelled) sends that chunk whole before it returns,
// and the next run continues after it instead of sending the blob again.
func TestPushStoppedMidChunkResumes(t *testing.T) {
	reg := ociregistry.StartT(t)
	f := writeRandom(t, filepath.Join(t.TempDir(), "weights.bin"), 6<<20)
	uploads := t.TempDir()
	cfg := cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}
	base := http.DefaultTransport.(*http.Transport).Clone()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := cache.New(cfg, cache.Options{Transport: &stopMidChunk{next: base, at: 3, stop: cancel}, ChunkSize: 1 << 20, UploadDir: uploads})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("5", 64)
	if _, err := first.Push(ctx, tag, cache.KindDownload, []byte(`{}`), []cache.File{f}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a push whose context was cancelled: %v", err)
	}
	rec := &rangeRecorder{next: base}
	second, err := cache.New(cfg, cache.Options{Transport: rec, ChunkSize: 1 << 20, UploadDir: uploads})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Push(context.Background(), tag, cache.KindDownload, []byte(`{}`), []cache.File{f}); err != nil {
		t.Fatalf("the next run's push: %v", err)
	}
	if len(rec.ranges) != 3 || rec.ranges[0] != fmt.Sprintf("%d-%d", 3<<20, 4<<20-1) {
		t.Errorf("the next run sent ranges %q; want the 3 MiB after the chunk that was in flight", rec.ranges)
	}
	a, err := second.Lookup(context.Background(), tag)
	if err != nil || a == nil {
		t.Fatal(a, err)
	}
	if err := second.Pull(context.Background(), a, t.TempDir()); err != nil {
		t.Fatalf("pulling the resumed blob (its sha256 is checked): %v", err)
	}
}

// TestLookupRefusesALayerWithoutASize: distribution stores a manifest whose layer says
// size -1; pulled as it is, that is a file of unknown size, read until the registry stops
// (a registry that never stops fills the disk). Lookup refuses it.
func TestLookupRefusesALayerWithoutASize(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	f := writeRandom(t, filepath.Join(t.TempDir(), "k.so"), 1000)
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("6", 64)
	if _, err := c.Push(ctx, tag, cache.KindBuild, []byte(`{}`), []cache.File{f}); err != nil {
		t.Fatal(err)
	}
	url := "http://" + reg.Addr + "/v2/fleet/sglprov/manifests/" + tag
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bad := bytes.Replace(m, []byte(`"size":1000`), []byte(`"size":-1`), 1)
	if bytes.Equal(bad, m) {
		t.Fatalf("no layer of size 1000 in %s", m)
	}
	req, _ = http.NewRequest(http.MethodPut, url, bytes.NewReader(bad))
	req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("putting the manifest: %v %v", resp, err)
	}
	resp.Body.Close()
	if a, err := c.Lookup(ctx, tag); err == nil || !strings.Contains(err.Error(), "size") {
		t.Fatalf("Lookup of a layer of size -1 = %+v, %v; want a refusal", a, err)
	}
}
