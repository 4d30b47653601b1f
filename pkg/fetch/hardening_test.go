package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A listing may hold both NAME and NAME.part: neither is the other's part file, and each
// ends with its own bytes.
func TestListedNameLikeAPartFile(t *testing.T) {
	big := randomBytes(t, 3<<20)
	small := randomBytes(t, 1000)
	srv := newFaultServer(t, map[string][]byte{"big": big, "small": small})
	dest := t.TempDir()
	files := []File{
		{URL: srv.url("big"), Path: "a.bin", Size: int64(len(big)), SHA256: sha256Hex(big)},
		{URL: srv.url("small"), Path: "a.bin.part", Size: int64(len(small)), SHA256: sha256Hex(small)},
		{URL: srv.url("small"), Path: "a.bin.part.json", Size: int64(len(small)), SHA256: sha256Hex(small)},
	}
	res, err := Fetch(context.Background(), files, testOptions(dest))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]byte{big, small, small} {
		if got := readFile(t, filepath.Join(dest, files[i].Path)); !bytes.Equal(got, want) {
			t.Errorf("%s holds %d bytes that are not its own", files[i].Path, len(got))
		}
		if res[i].SHA256 != files[i].SHA256 {
			t.Errorf("%s: result digest %s, want %s", files[i].Path, res[i].SHA256, files[i].SHA256)
		}
	}
	assertOnly(t, dest, "a.bin", "a.bin.part", "a.bin.part.json")
	if _, err := os.Stat(filepath.Join(dest, WorkDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind after a complete download: %v", WorkDir, err)
	}
}

func TestFetchRefusesTheWorkDir(t *testing.T) {
	for _, p := range []string{".sglprov/parts/a.bin.part", ".sglprov"} {
		_, err := Fetch(context.Background(), []File{{URL: "http://127.0.0.1:1/x", Path: p, Size: 1, SHA256: "00"}}, Options{Dest: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), ".sglprov/") {
			t.Errorf("path %q: err = %v, want a refusal naming .sglprov/", p, err)
		}
	}
	// A folder of that name deeper down is an ordinary folder.
	data := []byte("x")
	srv := newFaultServer(t, map[string][]byte{"x": data})
	dest := t.TempDir()
	if _, err := Fetch(context.Background(), []File{{URL: srv.url("x"), Path: "sub/.sglprov", Size: 1, SHA256: sha256Hex(data)}}, testOptions(dest)); err != nil {
		t.Error(err)
	}
}

// writeSidecar records, as a checkpoint would, that the first n bytes of data are hashed.
func writeSidecar(t *testing.T, dest, rel string, data []byte, n int) {
	t.Helper()
	h := sha256.New()
	h.Write(data[:n])
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sidecar{Version: 1, Size: int64(len(data)), SHA256: sha256Hex(data), Hashed: int64(n), State: state})
	if err := os.WriteFile(partSide(dest, rel), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Bytes of the part that were hashed and recorded, then changed on disk, are not trusted:
// the resume notices and the file starts over.
func TestResumeRehashesThePrefix(t *testing.T) {
	const size = 2 << 20
	for _, tc := range []struct {
		name    string
		corrupt int // offset of the flipped byte in the part
	}{
		{name: "inside the recorded prefix", corrupt: 1000},
		{name: "after the recorded prefix", corrupt: size/2 - 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(t, size)
			dest := t.TempDir()
			part := append([]byte(nil), data[:size/2]...)
			part[tc.corrupt] ^= 0x55
			if err := os.WriteFile(partFile(t, dest, "w.bin"), part, 0o644); err != nil {
				t.Fatal(err)
			}
			writeSidecar(t, dest, "w.bin", data, size/4)
			srv := newFaultServer(t, map[string][]byte{"w": data})
			var logs lines
			opt := testOptions(dest)
			opt.Logf = logs.logf
			f := File{URL: srv.url("w"), Path: "w.bin", Size: size, SHA256: sha256Hex(data)}
			res, err := Fetch(context.Background(), []File{f}, opt)
			if err != nil {
				t.Fatalf("%v\nlog:\n%s", err, strings.Join(logs.get(), "\n"))
			}
			if !bytes.Equal(readFile(t, filepath.Join(dest, "w.bin")), data) {
				t.Fatal("the final file holds the corrupted bytes")
			}
			if res[0].SHA256 != f.SHA256 {
				t.Errorf("result digest %s", res[0].SHA256)
			}
			log := strings.Join(logs.get(), "\n")
			if tc.corrupt < size/4 && (!strings.Contains(log, "changed since they were checked") || srv.served.Load() != size) {
				t.Errorf("served %d bytes; log:\n%s\nwant the change noticed at once and the whole file again", srv.served.Load(), log)
			}
			assertOnly(t, dest, "w.bin")
		})
	}
}

// failingWriter fails with ENOSPC, as a full disk does, once limit bytes are written.
type failingWriter struct {
	w       io.Writer
	name    string
	limit   int64
	written atomic.Int64
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.written.Add(int64(len(p))) > f.limit {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	return f.w.Write(p)
}

// A full disk ends the download with "no space left on device" and the part's path, not
// with the cancellation of the other connections and files that followed it.
func TestWriteErrorIsTheCause(t *testing.T) {
	wrapPartWriter = func(w io.Writer) io.Writer {
		name := ""
		if f, ok := w.(*os.File); ok {
			name = f.Name()
		}
		return &failingWriter{w: w, name: name, limit: 1 << 20}
	}
	defer func() { wrapPartWriter = nil }()
	const size = 4 << 20
	data := randomBytes(t, size)
	srv := newFaultServer(t, map[string][]byte{"w": data})
	srv.configure(func() { srv.throttle = 100 * time.Microsecond })
	dest := t.TempDir()
	files := []File{
		{URL: srv.url("w"), Path: "a.bin", Size: size, SHA256: sha256Hex(data)},
		{URL: srv.url("w"), Path: "b.bin", Size: size, SHA256: sha256Hex(data)},
	}
	opt := testOptions(dest)
	opt.Files = 2
	opt.Conns = 8
	_, err := Fetch(context.Background(), files, opt)
	if err == nil {
		t.Fatal("no error from a full disk")
	}
	t.Logf("error: %v", err)
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the write error itself, not a cancellation", err)
	}
	if !strings.Contains(err.Error(), "writing "+filepath.Join(dest, WorkDir, "parts")) || !strings.HasSuffix(err.Error(), ".part: no space left on device") || strings.Count(err.Error(), dest) != 1 {
		t.Errorf("err = %q, want the cause and the part's path", err)
	}
}

// A file listed without a size still comes in parallel ranges: the first answer states
// the size, and the rest fans out as for a known size.
func TestUnknownSizeFansOut(t *testing.T) {
	const size = 4 << 20
	data := randomBytes(t, size)
	srv := newFaultServer(t, map[string][]byte{"w": data})
	// About 32 MB/s per connection: one connection alone takes over 120 ms.
	srv.configure(func() { srv.throttle = time.Millisecond })
	dest := t.TempDir()
	f := File{URL: srv.url("w"), Path: "w.bin", Size: -1, SHA256: sha256Hex(data)}
	res, err := Fetch(context.Background(), []File{f}, testOptions(dest))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dest, "w.bin")), data) {
		t.Fatal("file differs")
	}
	if res[0].Size != size {
		t.Errorf("result size %d, want %d", res[0].Size, size)
	}
	reqs := srv.requests()
	if len(reqs) < 4 || reqs[0].rng != "bytes=0-262143" {
		t.Errorf("requests %+v: want a first range, then more ranges", reqs)
	}
	if peak := srv.peak.Load(); peak < 2 {
		t.Errorf("at most %d connection at a time: the parallel path was not used", peak)
	}
	if got := srv.served.Load(); got != size {
		t.Errorf("served %d bytes, want %d (each once)", got, size)
	}
}

// The first range of a file of unknown size may be longer than the file, the server may
// ignore it, and an empty file has no range at all: each still ends with the right file.
func TestUnknownSizeSmallOrNoRanges(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size        int
		ignoreRange bool
		requests    int
	}{
		{name: "shorter than the first range", size: 1000, requests: 1},
		{name: "server ignores Range", size: 3 << 20, ignoreRange: true, requests: 1},
		{name: "empty", size: 0, requests: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(t, tc.size)
			srv := newFaultServer(t, map[string][]byte{"w": data})
			srv.configure(func() {
				srv.plan = func(int, *http.Request) action { return action{ignoreRange: tc.ignoreRange} }
			})
			dest := t.TempDir()
			f := File{URL: srv.url("w"), Path: "w.bin", Size: -1, SHA256: sha256Hex(data)}
			if _, err := Fetch(context.Background(), []File{f}, testOptions(dest)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readFile(t, filepath.Join(dest, "w.bin")), data) {
				t.Fatal("file differs")
			}
			if reqs := srv.requests(); len(reqs) != tc.requests {
				t.Errorf("requests %+v, want %d", reqs, tc.requests)
			}
		})
	}
}

// RemoveParts removes what downloads left and says whose it was.
func TestRemoveParts(t *testing.T) {
	dest := t.TempDir()
	for _, rel := range []string{"old.bin", "sub/dir/x.safetensors"} {
		if err := os.WriteFile(partFile(t, dest, rel), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(partSide(dest, "old.bin"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, "keep.bin"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveParts(dest)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(removed, ",") != "old.bin,sub/dir/x.safetensors" {
		t.Errorf("removed %q", removed)
	}
	assertOnly(t, dest, "keep.bin")
	if _, err := os.Stat(filepath.Join(dest, WorkDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", WorkDir, err)
	}
	if removed, err := RemoveParts(t.TempDir()); err != nil || len(removed) != 0 {
		t.Errorf("RemoveParts of a folder without parts = %v, %v", removed, err)
	}
}

// Several Fetch calls into one folder at once (the cache path runs one per file): one that
// finishes removes the empty part folders while another is about to create its part.
func TestConcurrentFetchesIntoOneFolder(t *testing.T) {
	data := randomBytes(t, 4096)
	srv := newFaultServer(t, map[string][]byte{"w": data})
	dest := t.TempDir()
	for round := range 20 {
		errs := make(chan error, 16)
		for i := range 16 {
			go func() {
				f := File{URL: srv.url("w"), Path: fmt.Sprintf("r%d/sub/f%d.bin", round, i), Size: int64(len(data)), SHA256: sha256Hex(data)}
				_, err := Fetch(context.Background(), []File{f}, testOptions(dest))
				errs <- err
			}()
		}
		for range 16 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dest, WorkDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", WorkDir, err)
	}
}

// A symbolic link planted where a part file or its resume record goes is replaced, never
// written through: its target keeps its bytes.
func TestPartLinksAreNotFollowed(t *testing.T) {
	data := randomBytes(t, 3<<20)
	srv := newFaultServer(t, map[string][]byte{"x": data})
	dest := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	parts := filepath.Join(dest, WorkDir, partsDir)
	if err := os.MkdirAll(parts, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.bin.part", "a.bin.part.json.tmp"} {
		if err := os.Symlink(victim, filepath.Join(parts, name)); err != nil {
			t.Fatal(err)
		}
	}
	files := []File{{URL: srv.url("x"), Path: "a.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}}
	if _, err := Fetch(context.Background(), files, testOptions(dest)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, victim); string(got) != "precious" {
		t.Errorf("the link's target was written: %d bytes", len(got))
	}
	if got := readFile(t, filepath.Join(dest, "a.bin")); !bytes.Equal(got, data) {
		t.Errorf("a.bin holds %d bytes that are not its own", len(got))
	}
}
