package treepack

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

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

// newUnpacker makes the unpacker of a tree at root.
func newUnpacker(root string, opt UnpackOptions) *unpacker {
	return &unpacker{root: root, opt: opt, dirs: map[string]bool{".": true}, dirModes: map[string]os.FileMode{},
		jobs: make(chan writeJob, 2*opt.Writers), bufs: newBufs(3*opt.Writers + opt.Parallel)}
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
	layer string // the layer it came from, for errors
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
				cancel(fmt.Errorf("layer %s: writing %s: %w", j.layer, j.name, err))
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
