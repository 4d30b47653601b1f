package treepack

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/cache"
)

// Source opens a layer's bytes (a registry blob, a local file).
type Source interface {
	Open(ctx context.Context, layer cache.File) (io.ReadCloser, error)
}

// Registry is the Source of a fleet cache's blobs: one GET per layer, read as it streams.
type Registry struct{ Cache cache.Cache }

// Open starts the blob's download.
func (r Registry) Open(ctx context.Context, layer cache.File) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Cache.BlobURL(layer.SHA256), nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.Cache.HTTPClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("pulling %s from %s: %w", layer.Name, r.Cache.String(), err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("pulling %s from %s: %s", layer.Name, r.Cache.String(), resp.Status)
	}
	return resp.Body, nil
}

// Dir is the Source of layers written by Pack into a folder (by their names).
type Dir string

// Open opens the layer's file.
func (d Dir) Open(_ context.Context, layer cache.File) (io.ReadCloser, error) {
	return os.Open(filepath.Join(string(d), filepath.Base(layer.Name)))
}

// UnpackOptions bound and report an unpack.
type UnpackOptions struct {
	// MaxBytes bounds the tree's file bytes, MaxFiles its entries (0, or more than the
	// layers could hold: the layers' sizes, and one entry per 512 bytes of them).
	MaxBytes int64
	MaxFiles int
	// AllowLink is as in PackOptions: the absolute link targets out of the tree allowed.
	AllowLink func(name, target string) bool
	// Parallel is how many layers stream at once (default 16: a tree of a few GB streams
	// whole at once, with no last layer left to stream alone at the end).
	Parallel int
	// Writers is how many files are written at once (default 8): a layer's reader hands
	// each file of up to SmallFile bytes, read whole, to these writers, and writes a
	// larger one itself as it streams, so that creating many small files (their open,
	// write, times and close) overlaps the layers' reading and hashing.
	Writers int
	// StallTimeout fails a layer whose bytes stop for that long (default 60 s).
	StallTimeout time.Duration
	// Progress, when set, is called about every ProgressEvery (default 2 s) and at the end.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Check, when set, is called with the unpacked tree (the folder beside dest) before it
	// is renamed into place; an error leaves dest as it was.
	Check func(tree string) error
}

// Unpack streams layers from src into a new folder beside dest, checking each layer's
// size and sha256 as it is read, and, once every layer is whole (and opt.Check passed),
// renames it to dest. A dest that exists is replaced: moved aside, then removed once the
// new tree is in place. On any failure the folder beside is removed and dest is as it
// was. It returns the tree's stats.
func Unpack(ctx context.Context, src Source, layers []cache.File, dest string, opt UnpackOptions) (Stats, error) {
	total, err := layersSize(layers, dest)
	if err != nil {
		return Stats{}, err
	}
	opt = opt.bounded(total)
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Stats{}, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	stage := dest + ".sglprov-unpack-" + randHex()
	if err := os.Mkdir(stage, 0o755); err != nil {
		return Stats{}, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(stage) // made here, holding only what this unpack wrote
		}
	}()
	u := newUnpacker(stage, opt)
	prog := startProgress(opt, total, &u.read)
	err = u.stream(ctx, src, layers)
	prog.stop()
	if err == nil {
		err = u.finishDirs()
	}
	if err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	prog.report()
	if opt.Check != nil {
		if err := opt.Check(stage); err != nil {
			return u.stats, err
		}
	}
	if err := place(stage, dest, parent); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	ok = true
	return u.stats, nil
}

// layersSize is the layers' bytes in all; a layer without a size or a sha256 is unsafe.
func layersSize(layers []cache.File, dest string) (int64, error) {
	var total int64
	for _, l := range layers {
		if l.Size < 0 || len(l.SHA256) != 64 {
			return 0, fmt.Errorf("unpacking into %s: the layer %s has no size or sha256: %w", dest, l.Name, ErrUnsafe)
		}
		total += l.Size
	}
	return total, nil
}

// bounded fills in opt's defaults and bounds for layers of total bytes: a tar holds no
// more file bytes than its own, and no more entries than its 512-byte headers, so a
// record that claims more is bounded by the layers.
func (opt UnpackOptions) bounded(total int64) UnpackOptions {
	if opt.MaxBytes <= 0 || opt.MaxBytes > total {
		opt.MaxBytes = total
	}
	if maxEntries := int(total/512) + 16; opt.MaxFiles <= 0 || opt.MaxFiles > maxEntries {
		opt.MaxFiles = maxEntries
	}
	if opt.Parallel <= 0 {
		opt.Parallel = 16
	}
	if opt.StallTimeout <= 0 {
		opt.StallTimeout = 60 * time.Second
	}
	if opt.Writers <= 0 {
		opt.Writers = 8
	}
	return opt
}

// stream reads every layer, opt.Parallel at once, into the unpacker's tree, the small
// files through its writers; the first failure stops the rest and is returned.
func (u *unpacker) stream(ctx context.Context, src Source, layers []cache.File) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var writers sync.WaitGroup
	for range u.opt.Writers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			u.writer(ctx, cancel)
		}()
	}
	sem := make(chan struct{}, u.opt.Parallel)
	var wg sync.WaitGroup
	for _, l := range layers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if err := u.layer(ctx, src, l); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	close(u.jobs)
	writers.Wait()
	return context.Cause(ctx)
}

// place makes the unpacked stage durable and renames it to dest: one sync of the file
// system before the rename, in place of one per file, so that after a crash dest is the
// old tree or the whole new one, never one half written; then the parent's entry.
func place(stage, dest, parent string) error {
	if err := syncTree(stage); err != nil {
		return err
	}
	if err := replace(stage, dest); err != nil {
		return err
	}
	return atomicfile.SyncDir(parent)
}

// syncTree makes what was written under dir durable: one syncfs of its file system
// (every file and folder written there, in one call).
func syncTree(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// replace renames stage to dest; a dest that exists is moved aside first and removed
// after, and put back when the rename fails.
func replace(stage, dest string) error {
	var aside string
	if _, err := os.Lstat(dest); err == nil {
		aside = dest + ".sglprov-old-" + randHex()
		if err := os.Rename(dest, aside); err != nil {
			return err
		}
	}
	if err := os.Rename(stage, dest); err != nil {
		if aside != "" {
			_ = os.Rename(aside, dest)
		}
		return err
	}
	if aside != "" {
		return os.RemoveAll(aside)
	}
	return nil
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// stallReader counts what it reads and fails once nothing came for the stall timeout.
type stallReader struct {
	r    io.Reader
	n    *atomic.Int64
	last atomic.Int64 // unix nanos of the last read that brought bytes
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.n.Add(int64(n))
		s.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (u *unpacker) layer(ctx context.Context, src Source, l cache.File) error {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rc, err := src.Open(lctx, l)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	limited := io.LimitReader(rc, l.Size+1)
	sr := &stallReader{r: io.TeeReader(limited, h), n: &u.read}
	sr.last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(u.opt.StallTimeout / 4)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if time.Since(time.Unix(0, sr.last.Load())) > u.opt.StallTimeout {
					cancel(fmt.Errorf("layer %s: no bytes for %s", l.Name, u.opt.StallTimeout))
					rc.Close()
					return
				}
			case <-done:
				return
			}
		}
	}()
	var got int64
	count := &countReader{r: sr, n: &got}
	// Headers are read through a buffer: the hash, the stall watch and the network see
	// large reads, not one of 512 bytes per entry.
	br := bufio.NewReaderSize(count, 256<<10)
	tr := tar.NewReader(br)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return u.readErr(lctx, l, err)
		}
		if err := u.entry(lctx, l.Name, hdr, tr); err != nil {
			if errors.Is(err, ErrUnsafe) {
				return fmt.Errorf("layer %s: %w", l.Name, err)
			}
			return u.readErr(lctx, l, err)
		}
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return u.readErr(lctx, l, err)
	}
	if got != l.Size {
		return fmt.Errorf("layer %s: %d bytes, the manifest says %d", l.Name, got, l.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != l.SHA256 {
		return fmt.Errorf("layer %s: its sha256 is %s, the manifest says %s", l.Name, sum, l.SHA256)
	}
	return nil
}

// readErr prefers the stall's cause to the read error it made.
func (u *unpacker) readErr(ctx context.Context, l cache.File, err error) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return fmt.Errorf("layer %s: %w", l.Name, err)
}

type countReader struct {
	r io.Reader
	n *int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// entry writes one tar entry of the layer named layer under root.
func (u *unpacker) entry(ctx context.Context, layer string, hdr *tar.Header, r io.Reader) error {
	name := hdr.Name
	if hdr.Typeflag == tar.TypeDir {
		name = path.Clean(name)
	}
	if err := checkName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsafe, err)
	}
	if n := u.files.Add(1); n > int64(u.opt.MaxFiles) {
		return fmt.Errorf("%w: more than %d entries", ErrUnsafe, u.opt.MaxFiles)
	}
	mode := os.FileMode(hdr.Mode).Perm() &^ 0o022
	switch hdr.Typeflag {
	case tar.TypeDir:
		return u.dirEntry(name, mode)
	case tar.TypeReg:
		return u.fileEntry(ctx, layer, hdr, name, mode, r)
	case tar.TypeSymlink:
		return u.linkEntry(name, hdr.Linkname)
	default:
		return fmt.Errorf("%w: %s is of tar type %q, which an artifact does not carry", ErrUnsafe, name, hdr.Typeflag)
	}
}

// dirEntry makes the folder name; its mode is set once every file in it is written.
func (u *unpacker) dirEntry(name string, mode os.FileMode) error {
	if err := u.mkdirs(name); err != nil {
		return err
	}
	u.mu.Lock()
	u.dirModes[name] = mode
	u.stats.Dirs++
	u.mu.Unlock()
	return nil
}

// fileEntry writes the regular file name from r: one of up to SmallFile bytes is read
// whole and handed to the writers, a larger one written as it streams.
func (u *unpacker) fileEntry(ctx context.Context, layer string, hdr *tar.Header, name string, mode os.FileMode, r io.Reader) error {
	if hdr.Size < 0 || u.bytes.Add(hdr.Size) > u.opt.MaxBytes {
		return fmt.Errorf("%w: the files exceed %d bytes (%s)", ErrUnsafe, u.opt.MaxBytes, name)
	}
	if err := u.mkdirs(path.Dir(name)); err != nil {
		return err
	}
	p := filepath.Join(u.root, filepath.FromSlash(name))
	var err error
	if hdr.Size <= SmallFile {
		err = u.handSmall(ctx, layer, hdr, name, p, mode, r)
	} else {
		err = u.writeLarge(ctx, hdr, name, p, mode, r)
	}
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.stats.Files++
	u.stats.Bytes += hdr.Size
	u.mu.Unlock()
	return nil
}

// handSmall reads a small file whole into a buffer and hands it to the writers.
func (u *unpacker) handSmall(ctx context.Context, layer string, hdr *tar.Header, name, p string, mode os.FileMode, r io.Reader) error {
	buf, err := u.bufs.get(ctx)
	if err != nil {
		return err
	}
	n, err := io.ReadFull(r, (*buf)[:hdr.Size])
	if err != nil {
		u.bufs.put(buf)
		return fmt.Errorf("reading %s: %w", name, err)
	}
	select {
	case u.jobs <- writeJob{layer: layer, name: name, path: p, mode: mode, mtime: hdr.ModTime, buf: buf, n: n}:
		return nil
	case <-ctx.Done():
		u.bufs.put(buf)
		return context.Cause(ctx)
	}
}

// writeLarge writes a file larger than SmallFile as it streams from r.
func (u *unpacker) writeLarge(ctx context.Context, hdr *tar.Header, name, p string, mode os.FileMode, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o200)
	if err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrUnsafe, name, err)
	}
	buf, err := u.bufs.get(ctx)
	if err != nil {
		f.Close()
		return err
	}
	n, err := io.CopyBuffer(onlyWriter{f}, io.LimitReader(r, hdr.Size), *buf)
	u.bufs.put(buf)
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err = finishFile(f, err, mode, hdr.ModTime); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// linkEntry makes the symbolic link name to target, once checkLink allowed it.
func (u *unpacker) linkEntry(name, target string) error {
	if err := checkLink(name, target, u.opt.AllowLink); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsafe, err)
	}
	if err := u.mkdirs(path.Dir(name)); err != nil {
		return err
	}
	if err := os.Symlink(target, filepath.Join(u.root, filepath.FromSlash(name))); err != nil {
		return fmt.Errorf("%w: linking %s: %w", ErrUnsafe, name, err)
	}
	u.mu.Lock()
	u.stats.Links++
	u.mu.Unlock()
	return nil
}

// mkdirs makes the folder name (slash path) and its parents under root; a parent that is
// there but not a folder made here (a link) is refused, so nothing is written through a
// link.
func (u *unpacker) mkdirs(name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.dirs[name] {
		return nil
	}
	parent := path.Dir(name)
	if parent != name {
		u.mu.Unlock()
		err := u.mkdirs(parent)
		u.mu.Lock()
		if err != nil {
			return err
		}
	}
	if u.dirs[name] {
		return nil
	}
	p := filepath.Join(u.root, filepath.FromSlash(name))
	if err := os.Mkdir(p, 0o755); err != nil {
		return fmt.Errorf("%w: making the folder %s: %w", ErrUnsafe, name, err)
	}
	u.dirs[name] = true
	return nil
}

// finishDirs sets each folder's mode, deepest first (a folder without write permission
// is set last).
func (u *unpacker) finishDirs() error {
	names := make([]string, 0, len(u.dirModes))
	for n := range u.dirModes {
		names = append(names, n)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range names {
		if err := os.Chmod(filepath.Join(u.root, filepath.FromSlash(n)), u.dirModes[n]); err != nil {
			return err
		}
	}
	return nil
}
