package fetch

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkFetch measures in-process throughput against a loopback server that serves
// from memory (http.ServeContent, with ranges): the cost of receiving, writing and hashing.
func BenchmarkFetch(b *testing.B) {
	const size = 64 << 20
	data := randomBytes(b, size)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	sum := sha256Hex(data)
	cases := []struct {
		name  string
		files int
		conns int
	}{
		{"1file/1conn", 1, 1},
		{"1file/8conns", 1, 8},
		{"4files/1conn", 4, 1},
		{"4files/8conns", 4, 8},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dest := b.TempDir()
			var files []File
			for i := range c.files {
				files = append(files, File{URL: srv.URL + "/f", Path: fmt.Sprintf("f%d", i), Size: size, SHA256: sum})
			}
			opt := Options{Dest: dest, Conns: c.conns, Files: c.files}
			b.SetBytes(int64(size * c.files))
			b.ResetTimer()
			for range b.N {
				if _, err := Fetch(context.Background(), files, opt); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				for _, f := range files {
					os.Remove(filepath.Join(dest, f.Path))
				}
				b.StartTimer()
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536 << 20: "1.5 GiB", 3 << 40: "3.0 TiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if s := (&SpaceError{Dir: "/m", Need: 2 << 30, Free: 1 << 30}).Error(); !strings.Contains(s, "need 2.0 GiB, 1.0 GiB free") {
		t.Errorf("SpaceError = %q", s)
	}
}
