package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// endlessServer answers every request 200 with no Content-Length and a body that never
// ends: head first, then 'x' for ever, until the client hangs up. It counts the bytes it
// managed to send.
func endlessServer(t *testing.T, head []byte) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		n, err := w.Write(head)
		sent.Add(int64(n))
		chunk := []byte(strings.Repeat("x", 32<<10))
		for err == nil && r.Context().Err() == nil {
			n, err = w.Write(chunk)
			sent.Add(int64(n))
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &sent
}

// filesUnder lists the regular files under dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// A file of known size whose server sends its bytes and then never stops is cut at the
// first byte more: a clear error, no part file left, and no more than what was read ahead
// of the limit taken from the server.
func TestEndlessBodyOfAKnownSize(t *testing.T) {
	body := []byte("123456789")
	sum := sha256.Sum256(body)
	srv, sent := endlessServer(t, body)
	dest := t.TempDir()
	start := time.Now()
	_, err := Fetch(context.Background(), []File{{URL: srv.URL + "/blob", Path: "sub/blob.bin", Size: 9, SHA256: hex.EncodeToString(sum[:])}},
		Options{Dest: dest, RetryWait: time.Millisecond, StallTimeout: 5 * time.Second})
	var tl *TooLongError
	if !errors.As(err, &tl) || !tl.Known || tl.Limit != 9 || !strings.Contains(err.Error(), "more than the 9 bytes") {
		t.Fatalf("Fetch = %v, want a *TooLongError at 9 bytes", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	if left := filesUnder(t, dest); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if ents, _ := os.ReadDir(dest); len(ents) != 0 {
		t.Errorf("dest holds %v, want it as it was (empty)", ents)
	}
	if n := sent.Load(); n > 64<<20 {
		t.Errorf("the server sent %d bytes", n)
	}
}

// A file whose size is not given may take the free space less the reserve, no more: the
// error says so, and the part is removed.
func TestEndlessBodyOfAnUnknownSize(t *testing.T) {
	srv, _ := endlessServer(t, []byte("start"))
	dest := t.TempDir()
	const room = 3 << 20
	_, err := Fetch(context.Background(), []File{{URL: srv.URL + "/f", Path: "f.bin", Size: -1, SHA256: strings.Repeat("0", 64)}},
		Options{Dest: dest, RetryWait: time.Millisecond, StallTimeout: 5 * time.Second,
			FreeSpace: func(string) (uint64, error) { return UnknownSizeReserve + room, nil }})
	var tl *TooLongError
	if !errors.As(err, &tl) || tl.Known || tl.Limit != room {
		t.Fatalf("Fetch = %v, want a *TooLongError at the free space less the reserve", err)
	}
	for _, want := range []string{"gave no size", "1.0 GiB free", "give its size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if left := filesUnder(t, dest); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Where less than the reserve is free, a file of unknown size whose answer states a
// length that fits in half the free space still comes whole; one that states more, and
// one that states none, are stopped at their first byte.
func TestUnknownSizeOnANearlyFullDisk(t *testing.T) {
	small := bytes.Repeat([]byte("wheel "), 1000)
	sum := sha256.Sum256(small)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			w.Header().Set("Content-Length", strconv.Itoa(len(small)))
			_, _ = w.Write(small)
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(200<<20))
			_, _ = w.Write(small)
		}
	}))
	t.Cleanup(srv.Close)
	endless, _ := endlessServer(t, []byte("start"))
	const free = 256 << 20 // less than the reserve
	opt := func(dest string) Options {
		return Options{Dest: dest, RetryWait: time.Millisecond, StallTimeout: 5 * time.Second,
			FreeSpace: func(string) (uint64, error) { return free, nil }}
	}
	dest := t.TempDir()
	if _, err := Fetch(context.Background(), []File{{URL: srv.URL + "/small", Path: "small.whl", Size: -1, SHA256: hex.EncodeToString(sum[:])}}, opt(dest)); err != nil {
		t.Fatalf("Fetch of a %d-byte file that states its length, %d bytes free: %v", len(small), free, err)
	}
	if got, err := os.ReadFile(filepath.Join(dest, "small.whl")); err != nil || !bytes.Equal(got, small) {
		t.Errorf("small.whl: %d bytes (%v), want the %d served", len(got), err, len(small))
	}
	for _, url := range []string{srv.URL + "/big", endless.URL + "/f"} {
		dest := t.TempDir()
		_, err := Fetch(context.Background(), []File{{URL: url, Path: "f.bin", Size: -1, SHA256: strings.Repeat("0", 64)}}, opt(dest))
		var tl *TooLongError
		if !errors.As(err, &tl) || tl.Known || tl.Limit != 0 {
			t.Errorf("Fetch of %s with %d bytes free = %v, want a *TooLongError at 0 bytes", url, free, err)
		}
		if left := filesUnder(t, dest); len(left) != 0 {
			t.Errorf("%s left behind: %v", url, left)
		}
	}
}
