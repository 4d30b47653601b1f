package fetch

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// patterned is a file of any size made of one random block repeated: its bytes at any
// offset are known without holding the file in memory.
type patterned struct {
	block []byte
	size  int64
}

func (p patterned) writeRange(w interface{ Write([]byte) (int, error) }, a, b int64) error {
	for a < b {
		off := a % int64(len(p.block))
		n := min(int64(len(p.block))-off, b-a)
		if _, err := w.Write(p.block[off : off+n]); err != nil {
			return err
		}
		a += n
	}
	return nil
}

// BenchmarkResume measures what resuming a large part file costs: the part holds all
// but the last MiB of the file, with its resume record; each iteration re-hashes the part
// from disk (page cache warm, or the part evicted first: cold), then downloads the last
// MiB from a loopback server and renames the file into place. MB/s is of the part's
// size. SGLPROV_BENCH_RESUME_MB sets the file size (default 2048).
func BenchmarkResume(b *testing.B) {
	sizeMB := int64(2048)
	if v, err := strconv.ParseInt(os.Getenv("SGLPROV_BENCH_RESUME_MB"), 10, 64); err == nil && v > 1 {
		sizeMB = v
	}
	p := patterned{block: randomBytes(b, 1<<20+4093), size: sizeMB << 20}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, e, ok := parseRangeHeader(r.Header.Get("Range"), p.size)
		if !ok {
			a, e = 0, p.size
		} else {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, e-1, p.size))
		}
		w.Header().Set("Content-Length", strconv.FormatInt(e-a, 10))
		if ok {
			w.WriteHeader(http.StatusPartialContent)
		}
		_ = p.writeRange(w, a, e)
	}))
	defer srv.Close()

	dest := b.TempDir()
	have := p.size - 1<<20
	partPath := partFile(b, dest, "w.bin")
	pf, err := os.Create(partPath)
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.New()
	if err := p.writeRange(pf, 0, have); err != nil {
		b.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		b.Fatal(err)
	}
	// The record covers the part up to its last checkpoint, as a killed run leaves it.
	hashed := have - 3<<20
	if err := p.writeRange(h, 0, hashed); err != nil {
		b.Fatal(err)
	}
	state, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err := p.writeRange(h, hashed, p.size); err != nil {
		b.Fatal(err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	side, _ := json.Marshal(sidecar{Version: 1, Size: p.size, SHA256: sum, Hashed: hashed, State: state})
	f := File{URL: srv.URL + "/w", Path: "w.bin", Size: p.size, SHA256: sum}
	final := filepath.Join(dest, "w.bin")

	for _, cold := range []bool{false, true} {
		name := "warm"
		if cold {
			name = "cold"
		}
		b.Run(fmt.Sprintf("%dMiB/%s", sizeMB, name), func(b *testing.B) {
			b.SetBytes(have)
			for range b.N {
				b.StopTimer()
				// Put the part back as a killed run left it.
				if _, err := os.Stat(final); err == nil {
					if err := os.Rename(final, partFile(b, dest, "w.bin")); err != nil {
						b.Fatal(err)
					}
				}
				if err := os.Truncate(partPath, have); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(partSide(dest, "w.bin"), side, 0o644); err != nil {
					b.Fatal(err)
				}
				if cold {
					evict(b, partPath)
				}
				b.StartTimer()
				res, err := Fetch(context.Background(), []File{f}, Options{Dest: dest})
				if err != nil {
					b.Fatal(err)
				}
				if !res[0].Resumed || res[0].Bytes != 1<<20 {
					b.Fatalf("result %+v: want a resume that downloads 1 MiB", res[0])
				}
			}
		})
	}
}

// evict writes the file's dirty pages and drops the file from the page cache.
func evict(b *testing.B, path string) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}
