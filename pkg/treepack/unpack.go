package treepack

import (
	"archive/tar"
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
	// Parallel is how many layers stream at once (default 4).
	Parallel int
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
	total, err := checkLayers(layers)
	if err != nil {
		return Stats{}, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	opt = opt.withDefaults(total)
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
	u := &unpacker{root: stage, opt: opt, dirs: map[string]bool{".": true}, dirModes: map[string]os.FileMode{}}
	prog := startProgress(opt, total, &u.read)
	err = u.layers(ctx, src, layers)
	prog.stop()
	if err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	if err := u.finishDirs(); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	prog.report()
	if opt.Check != nil {
		if err := opt.Check(stage); err != nil {
			return u.stats, err
		}
	}
	if err := replace(stage, dest); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	ok = true
	return u.stats, nil
}

// checkLayers refuses a layer without a size or a sha256, and returns their bytes
// together.
func checkLayers(layers []cache.File) (int64, error) {
	var total int64
	for _, l := range layers {
		if l.Size < 0 || len(l.SHA256) != 64 {
			return 0, fmt.Errorf("the layer %s has no size or sha256: %w", l.Name, ErrUnsafe)
		}
		total += l.Size
	}
	return total, nil
}

// withDefaults fills the options left zero, and bounds the tree by layers of total
// bytes: a tar holds no more file bytes than its own, and no more entries than its
// 512-byte headers, so a record that claims more is bounded by the layers.
func (opt UnpackOptions) withDefaults(total int64) UnpackOptions {
	if opt.MaxBytes <= 0 || opt.MaxBytes > total {
		opt.MaxBytes = total
	}
	if maxEntries := int(total/512) + 16; opt.MaxFiles <= 0 || opt.MaxFiles > maxEntries {
		opt.MaxFiles = maxEntries
	}
	if opt.Parallel <= 0 {
		opt.Parallel = 4
	}
	if opt.StallTimeout <= 0 {
		opt.StallTimeout = 60 * time.Second
	}
	return opt
}

// layers unpacks every layer, opt.Parallel at once; the first error stops the others.
func (u *unpacker) layers(ctx context.Context, src Source, layers []cache.File) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
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
	return context.Cause(ctx)
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

// randHex returns 12 random hex digits, for a name beside dest.
func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// unpacker writes the entries of every layer into root.
type unpacker struct {
	root  string
	opt   UnpackOptions
	read  atomic.Int64 // layer bytes read
	bytes atomic.Int64 // file bytes written
	files atomic.Int64

	mu       sync.Mutex
	dirs     map[string]bool // folders made here (slash paths), safe to write into
	dirModes map[string]os.FileMode
	stats    Stats
}

// stallReader counts what it reads and fails once nothing came for the stall timeout.
type stallReader struct {
	r    io.Reader
	n    *atomic.Int64
	last atomic.Int64 // unix nanos of the last read that brought bytes
}

// Read reads from r, counting the bytes and when they came.
func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.n.Add(int64(n))
		s.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// layer streams layer l from src into the tree, checking its size and sha256, and fails
// it when its bytes stop for the stall timeout.
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
	tr := tar.NewReader(count)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return u.readErr(lctx, l, err)
		}
		if err := u.entry(hdr, tr); err != nil {
			if errors.Is(err, ErrUnsafe) {
				return fmt.Errorf("layer %s: %w", l.Name, err)
			}
			return u.readErr(lctx, l, err)
		}
	}
	if _, err := io.Copy(io.Discard, count); err != nil {
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

// countReader counts the bytes read through it into n.
type countReader struct {
	r io.Reader
	n *int64
}

// Read reads from r, counting the bytes.
func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// entry writes one tar entry under root.
func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
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
		if err := u.mkdirs(name); err != nil {
			return err
		}
		u.mu.Lock()
		u.dirModes[name] = mode
		u.stats.Dirs++
		u.mu.Unlock()
		return nil
	case tar.TypeReg:
		if hdr.Size < 0 || u.bytes.Add(hdr.Size) > u.opt.MaxBytes {
			return fmt.Errorf("%w: the files exceed %d bytes (%s)", ErrUnsafe, u.opt.MaxBytes, name)
		}
		if err := u.mkdirs(path.Dir(name)); err != nil {
			return err
		}
		p := filepath.Join(u.root, filepath.FromSlash(name))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o200)
		if err != nil {
			return fmt.Errorf("%w: writing %s: %w", ErrUnsafe, name, err)
		}
		n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil && mode&0o200 == 0 {
			err = os.Chmod(p, mode)
		}
		if err == nil {
			err = os.Chtimes(p, hdr.ModTime, hdr.ModTime)
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		u.mu.Lock()
		u.stats.Files++
		u.stats.Bytes += n
		u.mu.Unlock()
		return nil
	case tar.TypeSymlink:
		if err := checkLink(name, hdr.Linkname, u.opt.AllowLink); err != nil {
			return fmt.Errorf("%w: %w", ErrUnsafe, err)
		}
		if err := u.mkdirs(path.Dir(name)); err != nil {
			return err
		}
		if err := os.Symlink(hdr.Linkname, filepath.Join(u.root, filepath.FromSlash(name))); err != nil {
			return fmt.Errorf("%w: linking %s: %w", ErrUnsafe, name, err)
		}
		u.mu.Lock()
		u.stats.Links++
		u.mu.Unlock()
		return nil
	default:
		return fmt.Errorf("%w: %s is of tar type %q, which an artifact does not carry", ErrUnsafe, name, hdr.Typeflag)
	}
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
