package cache_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// concurrencyRecorder counts the PATCH requests (chunks of blob uploads) in flight at once,
// each held a little so that uploads that run side by side overlap.
type concurrencyRecorder struct {
	next         http.RoundTripper
	mu           sync.Mutex
	active, peak int
}

func (c *concurrencyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPatch {
		return c.next.RoundTrip(req)
	}
	c.mu.Lock()
	c.active++
	c.peak = max(c.peak, c.active)
	c.mu.Unlock()
	defer func() { c.mu.Lock(); c.active--; c.mu.Unlock() }()
	time.Sleep(50 * time.Millisecond)
	return c.next.RoundTrip(req)
}

// TestPushSendsBlobsInParallel: a push of 6 files to the real registry uploads several
// blobs at once, as many as a pull fetches files at once (Options.Fetch.Files), never more,
// and the artifact pulls back whole.
func TestPushSendsBlobsInParallel(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	src := t.TempDir()
	var files []cache.File
	for i := range 6 {
		files = append(files, writeRandom(t, filepath.Join(src, fmt.Sprintf("f%d.bin", i)), 3<<20+i))
	}
	rec := &concurrencyRecorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	opt := cache.Options{Transport: rec, ChunkSize: 1 << 20}
	opt.Fetch.Files = 3
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}, opt)
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("ef", 32)
	if _, err := pusher.Push(ctx, tag, cache.KindDownload, []byte(`{}`), files); err != nil {
		t.Fatal(err)
	}
	if rec.peak != 3 {
		t.Errorf("at most %d chunks were in flight at once; want 3 (Fetch.Files blobs side by side)", rec.peak)
	}
	puller, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := puller.Lookup(ctx, tag)
	if err != nil || a == nil {
		t.Fatalf("lookup: %v, %v", a, err)
	}
	for i, f := range a.Files {
		if f.Name != files[i].Name || f.SHA256 != files[i].SHA256 {
			t.Errorf("layer %d is %s %s, want %s %s (the files' order)", i, f.Name, f.SHA256, files[i].Name, files[i].SHA256)
		}
	}
	if err := puller.Pull(ctx, a, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// TestPushFailureStopsTheOthers: a blob that cannot be read fails the push, named, and no
// manifest is tagged.
func TestPushFailureStopsTheOthers(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	src := t.TempDir()
	var files []cache.File
	for i := range 4 {
		files = append(files, writeRandom(t, filepath.Join(src, fmt.Sprintf("f%d.bin", i)), 1<<20))
	}
	files[1].Path = filepath.Join(src, "gone.bin")
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("12", 32)
	_, err = pusher.Push(ctx, tag, cache.KindDownload, []byte(`{}`), files)
	if err == nil || !strings.Contains(err.Error(), "pushing f1.bin") {
		t.Fatalf("push with a missing file: %v; want an error naming f1.bin", err)
	}
	if a, err := pusher.Lookup(ctx, tag); err != nil || a != nil {
		t.Errorf("after a failed push the tag is %v (%v); want none", a, err)
	}
}

// TestPushAnnotatesTheManifest: the manifest carries org.opencontainers.image.created and
// the keys the caller put on the context, so that a registry's UI shows what a tag is.
func TestPushAnnotatesTheManifest(t *testing.T) {
	reg := ociregistry.StartT(t)
	src := t.TempDir()
	f := writeRandom(t, filepath.Join(src, "model.safetensors"), 1000)
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := cache.WithAnnotations(context.Background(), map[string]string{cache.AnnotationRecipe: "qwen3", cache.AnnotationSGLangCommit: ""})
	ctx = cache.WithAnnotations(ctx, map[string]string{cache.AnnotationModel: "Qwen/Qwen3-8B", cache.AnnotationRevision: "main"})
	before := time.Now().Add(-time.Second)
	tag := strings.Repeat("34", 32)
	if _, err := pusher.Push(ctx, tag, cache.KindDownload, []byte(`{}`), []cache.File{f}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+reg.Addr+"/v2/fleet/sglprov/manifests/"+tag, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest %s: %v", b, err)
	}
	want := map[string]string{"org.sglprov.recipe": "qwen3", "org.sglprov.model": "Qwen/Qwen3-8B", "org.sglprov.revision": "main"}
	for k, v := range want {
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q (all: %v)", k, m.Annotations[k], v, m.Annotations)
		}
	}
	if _, ok := m.Annotations["org.sglprov.sglang.commit"]; ok {
		t.Errorf("an empty annotation was written: %v", m.Annotations)
	}
	created, err := time.Parse(time.RFC3339, m.Annotations["org.opencontainers.image.created"])
	if err != nil || created.Before(before.Truncate(time.Second)) || created.After(time.Now()) {
		t.Errorf("org.opencontainers.image.created = %q (%v), want this push's time in RFC 3339", m.Annotations["org.opencontainers.image.created"], err)
	}
}
