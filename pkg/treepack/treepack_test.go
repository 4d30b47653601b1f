package treepack_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/treepack"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// writeTree writes a small tree like a venv's: scripts, a link to the interpreter out of
// the tree, relative links, a read-only folder, a file with an old mtime.
func writeTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "lib", "python3.11", "site-packages", "pkg"), 0o755))
	must(os.WriteFile(filepath.Join(root, "bin", "tool"), []byte("#!"+root+"/bin/python\nprint(1)\n"), 0o755))
	must(os.Symlink("/usr/bin/python3", filepath.Join(root, "bin", "python")))
	must(os.Symlink("python", filepath.Join(root, "bin", "python3")))
	must(os.Symlink("lib", filepath.Join(root, "lib64")))
	for i := range 50 {
		must(os.WriteFile(filepath.Join(root, "lib", "python3.11", "site-packages", "pkg", "m"+string(rune('a'+i%26))+strings.Repeat("x", i)+".py"), bytes.Repeat([]byte{byte(i)}, 1000*i), 0o644))
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	p := filepath.Join(root, "lib", "python3.11", "site-packages", "pkg", "ma.py")
	must(os.Chtimes(p, old, old))
	must(os.MkdirAll(filepath.Join(root, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(root, "ro", "f"), []byte("r"), 0o444))
	must(os.Chmod(filepath.Join(root, "ro"), 0o555))
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "ro"), 0o755) })
}

func allowPython(name, target string) bool {
	return name == "bin/python" && target == "/usr/bin/python3"
}

// describe lists a tree: each entry's kind, mode, size, link target, file digest, mtime.
func describe(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b.WriteString(rel + " " + fi.Mode().String())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			b.WriteString(" -> " + l)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(data)
			b.WriteString(" " + hex.EncodeToString(s[:8]) + " " + fi.ModTime().UTC().Format(time.RFC3339Nano))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestPackUnpackThroughRegistry: a tree pushed as layers and unpacked on another "node"
// from the real registry is the same tree: modes, links, scripts, mtimes; a destination
// that was there is replaced whole; progress is reported.
func TestPackUnpackThroughRegistry(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "venv")
	writeTree(t, src)
	layers, st, err := treepack.Pack(ctx, src, t.TempDir(), treepack.PackOptions{LayerSize: 10 << 10, AllowLink: allowPython})
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) < 3 || st.Files != 52 || st.Links != 3 {
		t.Fatalf("layers %d, stats %+v", len(layers), st)
	}
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/tree", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pusher.Push(ctx, "t1", "application/vnd.test", []byte("{}"), layers); err != nil {
		t.Fatal(err)
	}
	puller, _ := cache.New(cache.Config{Repository: reg.Addr + "/fleet/tree"}, cache.Options{})
	a, err := puller.Lookup(ctx, "t1")
	if err != nil || a == nil {
		t.Fatal(a, err)
	}
	dest := filepath.Join(t.TempDir(), "venv")
	if err := os.MkdirAll(filepath.Join(dest, "stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	var last treepack.Progress
	got, err := treepack.Unpack(ctx, treepack.Registry{Cache: puller}, a.Files, dest, treepack.UnpackOptions{
		AllowLink: allowPython, Progress: func(p treepack.Progress) { last = p }, ProgressEvery: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dest, "ro"), 0o755) })
	if got != st {
		t.Fatalf("unpacked %+v, packed %+v", got, st)
	}
	if last.Done != last.Total || last.Total == 0 {
		t.Fatalf("last progress %+v", last)
	}
	if a, b := describe(t, src), describe(t, dest); a != b {
		t.Fatalf("trees differ:\n%s\n---\n%s", a, b)
	}
	leftovers, _ := filepath.Glob(dest + ".sglprov-*")
	if len(leftovers) != 0 {
		t.Fatalf("left beside: %v", leftovers)
	}
}

// TestPackRefuses: a link out of the tree that is not allowed, and a FIFO, are refused
// when packing, naming them.
func TestPackRefuses(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "p")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := treepack.Pack(ctx, src, t.TempDir(), treepack.PackOptions{}); err == nil || !strings.Contains(err.Error(), "the link p points at /etc/passwd, outside the tree") {
		t.Fatalf("err = %v", err)
	}
	src2 := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(src2, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := treepack.Pack(ctx, src2, t.TempDir(), treepack.PackOptions{}); err == nil || !strings.Contains(err.Error(), "fifo is a p") {
		t.Fatalf("err = %v", err)
	}
}

type entry struct {
	name, link string
	typ        byte
	body       string
}

// layer writes a tar of entries into dir and returns it as a cache file.
func layer(t *testing.T, dir, name string, entries ...entry) cache.File {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)), ModTime: time.Now()}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(buf.Bytes())
	return cache.File{Name: name, Path: p, Size: int64(buf.Len()), SHA256: hex.EncodeToString(s[:])}
}

// TestUnpackHostile: an artifact that would write out of the tree, through a link, or
// beyond its bounds, or whose bytes are not its digest, is refused, and the destination
// (with a file sglprov never wrote) is byte-identical afterwards, with nothing left beside.
func TestUnpackHostile(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	cases := []struct {
		name    string
		entries []entry
		opt     treepack.UnpackOptions
		corrupt bool
		want    string
	}{
		{name: "dotdot", entries: []entry{{name: "../escape", typ: tar.TypeReg, body: "x"}}, want: "not a path inside the tree"},
		{name: "absolute", entries: []entry{{name: "/tmp/escape", typ: tar.TypeReg, body: "x"}}, want: "not a path inside the tree"},
		{name: "unclean", entries: []entry{{name: "a/../../escape", typ: tar.TypeReg, body: "x"}}, want: "not a path inside the tree"},
		{name: "absolute link", entries: []entry{{name: "l", typ: tar.TypeSymlink, link: outside}}, want: "outside the tree"},
		{name: "relative link out", entries: []entry{{name: "a/l", typ: tar.TypeSymlink, link: "../../x"}}, want: "outside the tree"},
		{name: "through a link", entries: []entry{{name: "d/", typ: tar.TypeDir}, {name: "l", typ: tar.TypeSymlink, link: "d"}, {name: "l/f", typ: tar.TypeReg, body: "x"}}, want: "making the folder l"},
		{name: "hard link", entries: []entry{{name: "h", typ: tar.TypeLink, link: "x"}}, want: "does not carry"},
		{name: "device", entries: []entry{{name: "c", typ: tar.TypeChar}}, want: "does not carry"},
		{name: "too big", entries: []entry{{name: "f", typ: tar.TypeReg, body: strings.Repeat("x", 100)}}, opt: treepack.UnpackOptions{MaxBytes: 10}, want: "exceed 10 bytes"},
		{name: "too many", entries: []entry{{name: "a", typ: tar.TypeReg}, {name: "b", typ: tar.TypeReg}}, opt: treepack.UnpackOptions{MaxFiles: 1}, want: "more than 1 entries"},
		{name: "digest", entries: []entry{{name: "f", typ: tar.TypeReg, body: "hello"}}, corrupt: true, want: "its sha256 is"},
		// A small file is written by one of the writers, after the entries that follow it
		// were read: an entry of the same name, whatever its kind, is still refused.
		{name: "a file twice", entries: []entry{{name: "f", typ: tar.TypeReg, body: "a"}, {name: "f", typ: tar.TypeReg, body: "b"}}, want: "exists"},
		{name: "a file then a link", entries: []entry{{name: "f", typ: tar.TypeReg, body: "a"}, {name: "f", typ: tar.TypeSymlink, link: "g"}}, want: "exists"},
		{name: "a file then a folder", entries: []entry{{name: "f", typ: tar.TypeReg, body: "a"}, {name: "f/g", typ: tar.TypeReg, body: "b"}}, want: "exists"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := layer(t, dir, "layer-000.tar", c.entries...)
			if c.corrupt {
				l.SHA256 = strings.Repeat("0", 64)
			}
			dest := filepath.Join(t.TempDir(), "tree")
			os.MkdirAll(dest, 0o755)
			os.WriteFile(filepath.Join(dest, "mine"), []byte("not sglprov's"), 0o600)
			before := describe(t, dest)
			_, err := treepack.Unpack(ctx, treepack.Dir(dir), []cache.File{l}, dest, c.opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if c.name != "digest" && !errors.Is(err, treepack.ErrUnsafe) {
				t.Fatalf("err = %v, not ErrUnsafe", err)
			}
			if after := describe(t, dest); after != before {
				t.Fatalf("dest changed:\n%s\n---\n%s", before, after)
			}
			if left, _ := filepath.Glob(dest + ".sglprov-*"); len(left) != 0 {
				t.Fatalf("left beside: %v", left)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("wrote outside: %v", ents)
			}
		})
	}
}

// TestUnpackStall: a layer whose bytes stop fails after the stall timeout, not never.
func TestUnpackStall(t *testing.T) {
	dir := t.TempDir()
	l := layer(t, dir, "layer-000.tar", entry{name: "f", typ: tar.TypeReg, body: strings.Repeat("x", 10000)})
	start := time.Now()
	_, err := treepack.Unpack(context.Background(), stallSource{dir}, []cache.File{l}, filepath.Join(t.TempDir(), "t"), treepack.UnpackOptions{StallTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no bytes for 200ms") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
}

// stallSource gives the first 1000 bytes of a layer, then blocks until closed.
type stallSource struct{ dir string }

func (s stallSource) Open(ctx context.Context, l cache.File) (io.ReadCloser, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, l.Name))
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.Write(data[:1000]) }()
	return pr, nil
}

// TestUnpackWriters: a tree of many small files and files larger than SmallFile (written
// as they stream) is the same tree with one writer and with many, its mtimes and modes
// included.
func TestUnpackWriters(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "tree")
	writeTree(t, src)
	big := filepath.Join(src, "lib", "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		data := bytes.Repeat([]byte{byte(i + 1)}, treepack.SmallFile+i*777)
		if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("blob%d.so", i)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("m%03d.py", i)), []byte(strings.Repeat("x", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	layers, st, err := treepack.Pack(ctx, src, dir, treepack.PackOptions{LayerSize: 1 << 20, AllowLink: allowPython})
	if err != nil {
		t.Fatal(err)
	}
	want := describe(t, src)
	for _, w := range []int{1, 16} {
		dest := filepath.Join(t.TempDir(), "tree")
		got, err := treepack.Unpack(ctx, treepack.Dir(dir), layers, dest, treepack.UnpackOptions{AllowLink: allowPython, Writers: w})
		if err != nil {
			t.Fatalf("%d writers: %v", w, err)
		}
		t.Cleanup(func() { os.Chmod(filepath.Join(dest, "ro"), 0o755) })
		if got != st {
			t.Errorf("%d writers: unpacked %+v, packed %+v", w, got, st)
		}
		if d := describe(t, dest); d != want {
			t.Errorf("%d writers: trees differ:\n%s\n---\n%s", w, want, d)
		}
	}
}
