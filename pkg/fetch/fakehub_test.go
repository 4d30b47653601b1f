package fetch

import (
	"context"
	"net/http"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sglprov/sglprov/test/fakehub"
)

// hubFiles serves two 3 MiB LFS files from a fake hub with opt and returns them as Files.
func hubFiles(t *testing.T, opt fakehub.Options) (*fakehub.Hub, []File) {
	t.Helper()
	a, b := randomBytes(t, 3<<20), randomBytes(t, 3<<20)
	opt.Repo = "org/m"
	opt.FS = fstest.MapFS{"a.bin": {Data: a}, "b.bin": {Data: b}}
	h, err := fakehub.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	t.Cleanup(h.Close)
	u := h.URL() + "/org/m/resolve/" + h.Commit() + "/"
	return h, []File{
		{URL: u + "a.bin", Path: "a.bin", Size: int64(len(a)), SHA256: sha256Hex(a)},
		{URL: u + "b.bin", Path: "b.bin", Size: int64(len(b)), SHA256: sha256Hex(b)},
	}
}

// TestSignedURLExpires: the CDN URL a redirect hands out expires while the file is still
// coming (403 from the CDN); the downloader asks resolve again for a fresh one and
// finishes.
func TestSignedURLExpires(t *testing.T) {
	h, files := hubFiles(t, fakehub.Options{SignedURLTTL: 300 * time.Millisecond, Rate: 2 << 20})
	opt := testOptions(t.TempDir())
	opt.Conns = 2
	start := time.Now()
	if _, err := Fetch(context.Background(), files, opt); err != nil {
		t.Fatalf("Fetch with CDN URLs that expire after 300ms: %v", err)
	}
	if time.Since(start) < 400*time.Millisecond || h.Expired() == 0 {
		t.Errorf("took %s with %d expired URLs refused: the test proves nothing", time.Since(start), h.Expired())
	}
}

// TestHubRateLimited: resolve answers 429 with Retry-After and the hub's RateLimit
// header; the downloader waits what they ask and finishes.
func TestHubRateLimited(t *testing.T) {
	h, files := hubFiles(t, fakehub.Options{})
	h.RateLimit(3)
	opt := testOptions(t.TempDir())
	// A budget longer than the wait asked for: one shorter fails at once (TestRetryAfterBeyondTheBudget).
	opt.NoProgress = 5 * time.Second
	start := time.Now()
	if _, err := Fetch(context.Background(), files, opt); err != nil {
		t.Fatalf("Fetch through 429s: %v", err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("finished in %s: the 429's Retry-After of 1 s was not waited", took)
	}
}

// TestHubOverTLSWithH2: the fake hub and CDN over TLS, offering h2 as the real ones do:
// the parallel ranges of both files come over HTTP/1.1 on their own connections.
func TestHubOverTLSWithH2(t *testing.T) {
	h, files := hubFiles(t, fakehub.Options{TLS: true, Rate: 8 << 20})
	resp, err := h.Client().Get(files[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("the fake hub over TLS answered %s, want h2 offered", resp.Proto)
	}
	_, before := h.Connections()
	tr := newTransport(8)
	tr.TLSClientConfig.RootCAs = h.CertPool()
	opt := testOptions(t.TempDir())
	opt.Files, opt.Conns = 2, 4
	opt.Client = &http.Client{Transport: tr}
	if _, err := Fetch(context.Background(), files, opt); err != nil {
		t.Fatal(err)
	}
	if _, after := h.Connections(); after-before < 4 {
		t.Errorf("the CDN saw %d connections for 2 files of 4 ranged connections each, want them apart", after-before)
	}
}
