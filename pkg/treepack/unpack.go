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
	"unsafe"

	"golang.org/x/sys/unix"

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

// Progress is where an unpack stands.
type Progress struct {
	// Done and Total are the layers' bytes read and to read.
	Done, Total int64
	// Rate is bytes per second since the start; ETA the time left at that rate.
	Rate    float64
	ETA     time.Duration
	Elapsed time.Duration
}

// String says the progress in a log's words.
func (p Progress) String() string {
	return fmt.Sprintf("%d/%d MiB, %.0f MiB/s, %s left", p.Done>>20, p.Total>>20, p.Rate/(1<<20), p.ETA.Round(time.Second))
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
	var total int64
	for _, l := range layers {
		if l.Size < 0 || len(l.SHA256) != 64 {
			return Stats{}, fmt.Errorf("unpacking into %s: the layer %s has no size or sha256: %w", dest, l.Name, ErrUnsafe)
		}
		total += l.Size
	}
	// A tar holds no more file bytes than its own, and no more entries than its 512-byte
	// headers: a record that claims more is bounded by the layers.
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
	u := &unpacker{root: stage, opt: opt, dirs: map[string]bool{".": true}, dirModes: map[string]os.FileMode{}, jobs: make(chan writeJob, 2*opt.Writers), bufs: newBufs(3*opt.Writers + opt.Parallel)}
	start := time.Now()
	report := func() {
		if opt.Progress == nil {
			return
		}
		done := u.read.Load()
		el := time.Since(start)
		p := Progress{Done: done, Total: total, Elapsed: el}
		if s := el.Seconds(); s > 0 {
			p.Rate = float64(done) / s
		}
		if p.Rate > 0 {
			p.ETA = time.Duration(float64(total-done) / p.Rate * float64(time.Second))
		}
		opt.Progress(p)
	}
	stopProgress := make(chan struct{})
	var pwg sync.WaitGroup
	if opt.Progress != nil {
		every := opt.ProgressEvery
		if every <= 0 {
			every = 2 * time.Second
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					report()
				case <-stopProgress:
					return
				}
			}
		}()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var writers sync.WaitGroup
	for range opt.Writers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			u.writer(ctx, cancel)
		}()
	}
	sem := make(chan struct{}, opt.Parallel)
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
	close(stopProgress)
	pwg.Wait()
	if err := context.Cause(ctx); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	if err := u.finishDirs(); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	report()
	if opt.Check != nil {
		if err := opt.Check(stage); err != nil {
			return u.stats, err
		}
	}
	// One sync of the file system before the rename, in place of one per file: after a
	// crash, dest is the old tree or the whole new one, never one half written.
	if err := syncTree(stage); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	if err := replace(stage, dest); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	ok = true
	if err := syncDir(parent); err != nil {
		return u.stats, fmt.Errorf("unpacking into %s: %w", dest, err)
	}
	return u.stats, nil
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

// syncDir fsyncs the folder dir (a rename in it).
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
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

	jobs chan writeJob // small files, read whole, for the writers
	bufs *bufs
}

// SmallFile is the size up to which a file is read whole and written by one of the
// writers (UnpackOptions.Writers); a larger one is written as it streams.
const SmallFile = 1 << 20

// bufs is an unpack's SmallFile buffers: made as they are first needed, at most max of
// them, and reused (not left to the garbage collector, which would make new pages fault
// in for every file).
type bufs struct {
	free chan *[]byte
	made atomic.Int64
	max  int64
}

func newBufs(max int) *bufs { return &bufs{free: make(chan *[]byte, max), max: int64(max)} }

// get returns a free buffer, making one while fewer than max exist, else waiting for one.
func (b *bufs) get(ctx context.Context) (*[]byte, error) {
	select {
	case p := <-b.free:
		return p, nil
	default:
	}
	if b.made.Add(1) <= b.max {
		p := make([]byte, SmallFile)
		return &p, nil
	}
	b.made.Add(-1)
	select {
	case p := <-b.free:
		return p, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (b *bufs) put(p *[]byte) { b.free <- p }

// writeJob is one small file for a writer: its bytes in a pooled buffer.
type writeJob struct {
	name  string // slash path, for errors
	path  string
	mode  os.FileMode
	mtime time.Time
	buf   *[]byte
	n     int
}

// writer writes the small files handed to it until the jobs are closed; the first error
// cancels the unpack (the writers go on draining the jobs, writing nothing more).
func (u *unpacker) writer(ctx context.Context, cancel context.CancelCauseFunc) {
	for j := range u.jobs {
		if ctx.Err() == nil {
			if err := writeFile(j.path, (*j.buf)[:j.n], j.mode, j.mtime); err != nil {
				cancel(fmt.Errorf("writing %s: %w", j.name, err))
			}
		}
		u.bufs.put(j.buf)
	}
}

// writeFile creates the file p (it must not exist), writes data, sets its mode and
// modification time.
func writeFile(p string, data []byte, mode os.FileMode, mtime time.Time) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o200)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnsafe, err) // an entry twice, or over a link
	}
	_, err = f.Write(data)
	return finishFile(f, err, mode, mtime)
}

// finishFile sets a written file's mode (when it has no write bit) and its access and
// modification times, through its descriptor, starts the writeback of its bytes
// (sync_file_range, which does not wait: the one sync before the rename then finds them
// on their way to the disk) and closes it.
func finishFile(f *os.File, err error, mode os.FileMode, mtime time.Time) error {
	if err == nil && mode&0o200 == 0 {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = futimens(f, mtime)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// futimens sets the open file's access and modification times to t (utimensat on the
// descriptor, with no path to look up), then starts the writeback of its bytes.
func futimens(f *os.File, t time.Time) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
		if e != 0 {
			serr = e
			return
		}
		// Only a start: a file system without it still gets the sync before the rename.
		_ = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setting the times of %s: %w", f.Name(), serr)
	}
	return nil
}

// onlyWriter hides a file's ReadFrom, so that io.CopyBuffer uses the buffer it is given.
type onlyWriter struct{ io.Writer }

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
		if err := u.entry(lctx, hdr, tr); err != nil {
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

// entry writes one tar entry under root.
func (u *unpacker) entry(ctx context.Context, hdr *tar.Header, r io.Reader) error {
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
		if hdr.Size <= SmallFile {
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
			case u.jobs <- writeJob{name: name, path: p, mode: mode, mtime: hdr.ModTime, buf: buf, n: n}:
			case <-ctx.Done():
				u.bufs.put(buf)
				return context.Cause(ctx)
			}
		} else {
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
		}
		u.mu.Lock()
		u.stats.Files++
		u.stats.Bytes += hdr.Size
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
