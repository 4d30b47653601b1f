// Package treepack carries a folder tree (a Python environment, a compiled-kernel cache)
// through the fleet cache as one content-addressed artifact: the tree is written as a few
// tar layers of about LayerSize bytes each (paths in sorted order, modes, modification
// times and symbolic links as they are on disk), and unpacked on another node from the
// registry's blobs as they stream in, every layer's size and sha256 checked, into a folder
// beside the destination that is renamed into place only once every layer is whole.
//
// Unpacking is safe against a hostile artifact: an entry's name is a clean relative path
// (no "..", not absolute), never written through a symbolic link, a link's target stays
// in the tree (an absolute target only where the caller allows it, e.g. a venv's link to
// its interpreter), no hard links or devices, and the tree's bytes and files are bounded.
package treepack

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/cache"
)

// LayerSize is the size a layer is closed at (a file is never split between layers): a
// tree of several GB becomes several layers, pulled and unpacked at once.
const LayerSize = 256 << 20

// Stats is the size of a tree.
type Stats struct {
	// Files counts regular files, Links symbolic links, Dirs folders; Bytes is the regular
	// files' bytes.
	Files, Links, Dirs int
	Bytes              int64
}

// PackOptions tune Pack.
type PackOptions struct {
	// LayerSize overrides the package's LayerSize (tests).
	LayerSize int64
	// AllowLink reports whether a symbolic link at name (slash path in the tree) may point
	// at the absolute target outside the tree; nil: none may. A link to a path inside the
	// tree is always allowed.
	AllowLink func(name, target string) bool
	// Skip reports whether the entry name (slash path) is left out of the artifact.
	Skip func(name string) bool
}

// Pack writes the tree at root as tar layers into dir (layer-000.tar, ...), and returns
// them as cache files (Name, Path, Size, SHA256) with the tree's stats. Anything other
// than folders, regular files and symbolic links (a FIFO, a socket, a device) is refused,
// naming it, as is a link out of the tree that AllowLink does not allow.
func Pack(ctx context.Context, root, dir string, opt PackOptions) ([]cache.File, Stats, error) {
	var st Stats
	limit := opt.LayerSize
	if limit <= 0 {
		limit = LayerSize
	}
	names, err := listTree(root, opt.Skip)
	if err != nil {
		return nil, st, fmt.Errorf("packing %s: %w", root, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, st, fmt.Errorf("packing %s: %w", root, err)
	}
	ls := &layerSet{dir: dir}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		hdr, err := entryHeader(p, name, opt.AllowLink, &st)
		if err != nil {
			return nil, st, fmt.Errorf("packing %s: %w", root, err)
		}
		cur, err := ls.current()
		if err != nil {
			return nil, st, err
		}
		if err := cur.add(hdr, p); err != nil {
			cur.abort()
			return nil, st, fmt.Errorf("packing %s: %w", root, err)
		}
		if cur.n >= limit {
			if err := ls.closeCurrent(); err != nil {
				return nil, st, err
			}
		}
	}
	if err := ls.closeCurrent(); err != nil {
		return nil, st, err
	}
	return ls.done, st, nil
}

// listTree returns the slash paths of everything under root (root itself aside), sorted;
// what skip names is left out, a folder with all it holds.
func listTree(root string, skip func(name string) bool) ([]string, error) {
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if skip != nil && skip(name) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		names = append(names, name)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// entryHeader returns the tar header of the entry name at p, counting it in st: a
// regular file, a folder or a symbolic link that checkLink allows; anything else is
// refused.
func entryHeader(p, name string, allowLink func(name, target string) bool, st *Stats) (*tar.Header, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	hdr := &tar.Header{Name: name, ModTime: fi.ModTime(), Mode: int64(fi.Mode().Perm()), Format: tar.FormatPAX}
	switch {
	case fi.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		st.Files++
		st.Bytes += fi.Size()
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		st.Dirs++
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		if err := checkLink(name, target, allowLink); err != nil {
			return nil, err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		st.Links++
	default:
		return nil, fmt.Errorf("%s is a %s, which an artifact does not carry (remove it from the tree)", name, fi.Mode().Type())
	}
	return hdr, nil
}

// layerSet is the layers Pack writes into dir: those done, and the one being written.
type layerSet struct {
	dir  string
	done []cache.File
	cur  *layerWriter
}

// current returns the layer being written, starting the next one (layer-NNN.tar) when
// none is.
func (s *layerSet) current() (*layerWriter, error) {
	if s.cur == nil {
		l, err := newLayer(filepath.Join(s.dir, fmt.Sprintf("layer-%03d.tar", len(s.done))))
		if err != nil {
			return nil, err
		}
		s.cur = l
	}
	return s.cur, nil
}

// closeCurrent closes the layer being written, if any, and adds it to those done.
func (s *layerSet) closeCurrent() error {
	if s.cur == nil {
		return nil
	}
	f, err := s.cur.close()
	s.cur = nil
	if err != nil {
		return err
	}
	s.done = append(s.done, f)
	return nil
}

// layerWriter is one tar layer being written, hashed as it goes.
type layerWriter struct {
	path string
	f    *os.File
	bw   *bufio.Writer
	h    hashCounter
	tw   *tar.Writer
	n    int64 // file bytes in the layer
}

// hashCounter hashes and counts the bytes written through it.
type hashCounter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

// Write hashes and counts p.
func (c *hashCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// newLayer creates the layer file p (it must not exist).
func newLayer(p string) (*layerWriter, error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writing a layer: %w", err)
	}
	l := &layerWriter{path: p, f: f}
	l.h.h = sha256.New()
	l.bw = bufio.NewWriterSize(io.MultiWriter(f, &l.h), 1<<20)
	l.tw = tar.NewWriter(l.bw)
	return l, nil
}

// add writes hdr and, for a regular file, the bytes of p (its size must not change).
func (l *layerWriter) add(hdr *tar.Header, p string) error {
	if err := l.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(l.tw, f)
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("%s changed while it was packed", hdr.Name)
	}
	l.n += n
	return nil
}

// close finishes the layer and returns it as a cache file (removed on an error).
func (l *layerWriter) close() (cache.File, error) {
	err := l.tw.Close()
	if err == nil {
		err = l.bw.Flush()
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(l.path)
		return cache.File{}, fmt.Errorf("writing a layer: %w", err)
	}
	return cache.File{Name: filepath.Base(l.path), Path: l.path, Size: l.h.n, SHA256: hex.EncodeToString(l.h.h.Sum(nil)), Mode: 0o644}, nil
}

// abort closes and removes a layer half written.
func (l *layerWriter) abort() {
	l.f.Close()
	os.Remove(l.path)
}

// checkName refuses an entry name that is not a clean relative slash path in the tree.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == "." || name == ".." ||
		strings.HasPrefix(name, "../") || strings.Contains(name, "\x00") {
		return fmt.Errorf("the entry %q is not a path inside the tree", name)
	}
	return nil
}

// checkLink refuses a symbolic link at name whose target leaves the tree, unless it is
// absolute and allow allows it.
func checkLink(name, target string, allow func(name, target string) bool) error {
	if target == "" || strings.Contains(target, "\x00") {
		return fmt.Errorf("the link %s has no target", name)
	}
	if path.IsAbs(target) {
		if allow != nil && allow(name, target) {
			return nil
		}
		return fmt.Errorf("the link %s points at %s, outside the tree", name, target)
	}
	resolved := path.Join(path.Dir(name), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("the link %s points at %s, outside the tree", name, target)
	}
	return nil
}

// ErrUnsafe marks an artifact refused for what it would write (a path or link out of the
// tree, an entry of a kind not carried, a size beyond the bounds).
var ErrUnsafe = errors.New("unsafe artifact")
