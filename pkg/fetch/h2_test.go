package fetch

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestRangesOnSeparateConnections: against a TLS server that offers h2 (as the hub's CDN
// does), the parallel ranges of the files come on separate TCP connections over HTTP/1.1,
// not as streams of one HTTP/2 connection that a per-connection cap would throttle as one.
func TestRangesOnSeparateConnections(t *testing.T) {
	data := randomBytes(t, 3<<20)
	var mu sync.Mutex
	conns := 0
	protos := map[string]int{}
	active, peak := 0, 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto]++
		active++
		peak = max(peak, active)
		mu.Unlock()
		defer func() { mu.Lock(); active--; mu.Unlock() }()
		a, b := int64(0), int64(len(data))
		status := http.StatusOK
		if rng := r.Header.Get("Range"); rng != "" {
			var ok bool
			a, b, ok = parseRangeHeader(rng, int64(len(data)))
			if !ok {
				w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
				return
			}
			w.Header().Set("Content-Range", "bytes "+strconv.FormatInt(a, 10)+"-"+strconv.FormatInt(b-1, 10)+"/"+strconv.Itoa(len(data)))
			status = http.StatusPartialContent
		}
		w.Header().Set("Content-Length", strconv.FormatInt(b-a, 10))
		w.WriteHeader(status)
		for off := a; off < b; off += 64 << 10 {
			if _, err := w.Write(data[off:min(off+64<<10, b)]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond) // slow enough that the ranges overlap
		}
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	// The server really offers h2: a client that accepts it gets it.
	resp, err := srv.Client().Get(srv.URL + "/probe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("the test server answered %s, want HTTP/2 offered", resp.Proto)
	}
	mu.Lock()
	conns, protos = 0, map[string]int{}
	mu.Unlock()

	// The downloader's own transport, trusting the test server's certificate.
	tr := newTransport(8)
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	tr.TLSClientConfig.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	dest := t.TempDir()
	opt := testOptions(dest)
	opt.Conns = 4
	opt.Files = 2
	opt.Client = &http.Client{Transport: tr}
	files := []File{
		{URL: srv.URL + "/a", Path: "a.bin", Size: int64(len(data)), SHA256: sha256Hex(data)},
		{URL: srv.URL + "/b", Path: "b.bin", Size: int64(len(data)), SHA256: sha256Hex(data)},
	}
	if _, err := Fetch(context.Background(), files, opt); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if protos["HTTP/2.0"] > 0 || protos["HTTP/1.1"] == 0 {
		t.Errorf("requests by protocol: %v, want HTTP/1.1 only", protos)
	}
	if conns < 4 || peak < 4 {
		t.Errorf("%d TCP connections, at most %d requests at once; want the ranges of 2 files x 4 connections on their own connections (at least 4)", conns, peak)
	}
}
