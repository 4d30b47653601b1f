package fakehub_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sglprov/sglprov/test/fakehub"
)

// TestRate: a throttled hub takes at least size/rate to serve a file, and serves it whole.
func TestRate(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 64<<10)
	h, err := fakehub.New(fakehub.Options{Repo: "org/m", FS: fstest.MapFS{"config.json": {Data: data}},
		Rate: 128 << 10, LFSThreshold: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	defer h.Close()
	start := time.Now()
	resp, err := http.Get(h.URL() + "/org/m/resolve/" + h.Commit() + "/config.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("served %d bytes (%v), want the file's %d", len(got), err, len(data))
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("64 KiB at 128 KiB/s took %s, want about 0.5 s", took)
	}
}
