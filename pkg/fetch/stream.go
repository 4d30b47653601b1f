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
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// pool bounds the bytes held in memory over all files of a Fetch call: pieces read ahead of
// a file's hashed frontier count against max; the piece at the frontier may use a small
// per-file reserve instead, so that the frontier always moves and nothing deadlocks.
type pool struct {
	mu      sync.Mutex
	cond    *sync.Cond // connections waiting for memory
	waiting int        // how many wait on cond
	used    int
	max     int
	free    [][]byte
}

func newPool(maxBuffer int64) *pool {
	p := &pool{max: max(int(maxBuffer/pieceSize), 1)}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *pool) get() []byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	return make([]byte, pieceSize)
}

// wake wakes the connections waiting for memory, if any; p.mu is held.
func (p *pool) wake() {
	if p.waiting > 0 {
		p.cond.Broadcast()
	}
}

// piece is a run of bytes of a file at offset off.
type piece struct {
	buf     []byte
	data    []byte
	off     int64
	reserve bool
}

// wrapPartWriter, when set (by tests only), wraps the writer of every part file, to inject
// write errors such as a full disk.
var wrapPartWriter func(io.Writer) io.Writer

// stream is one attempt at one file: connections deliver pieces in any order; the sink
// writes and hashes them in order.
type stream struct {
	j  *job
	p  *pool
	pf *os.File
	// w is where the sink writes the part's bytes: pf, or what wrapPartWriter makes of it.
	w io.Writer
	h *hashers
	// sinkCond wakes the sink (on p.mu) when pieces are queued or the stream ends.
	sinkCond *sync.Cond

	// Guarded by p.mu.
	contig      int64 // end of the bytes delivered without a gap
	ahead       map[int64]*piece
	queue       []*piece // in order, waiting for the sink
	reserveUsed int
	finished    bool
	err         error
	size        int64

	// Owned by the sink (and by attempt once the sink is done).
	written  int64
	lastCk   int64
	lastCkAt time.Time
}

func newStream(j *job, pf *os.File, h *hashers, have, size int64) *stream {
	var w io.Writer = pf
	if wrapPartWriter != nil {
		w = wrapPartWriter(pf)
	}
	return &stream{j: j, p: j.pool, pf: pf, w: w, h: h, contig: have, written: have, lastCk: have,
		lastCkAt: time.Now(), size: size, ahead: map[int64]*piece{}, sinkCond: sync.NewCond(&j.pool.mu)}
}

// acquire returns an empty piece for bytes at pos, waiting while the memory bound is reached.
func (s *stream) acquire(ctx context.Context, pos int64) (*piece, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		if s.err != nil {
			return nil, s.err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if pos == s.contig && s.reserveUsed < frontierReserve {
			s.reserveUsed++
			return &piece{buf: p.get(), reserve: true}, nil
		}
		if p.used < p.max {
			p.used++
			return &piece{buf: p.get()}, nil
		}
		if stop == nil {
			stop = context.AfterFunc(ctx, func() {
				p.mu.Lock()
				p.cond.Broadcast()
				p.mu.Unlock()
			})
		}
		p.waiting++
		p.cond.Wait()
		p.waiting--
	}
}

// releaseLocked returns pc's buffer; p.mu is held.
func (s *stream) releaseLocked(pc *piece) {
	if pc.reserve {
		s.reserveUsed--
	} else {
		s.p.used--
	}
	s.p.free = append(s.p.free, pc.buf)
	pc.buf, pc.data = nil, nil
}

func (s *stream) release(pc *piece) {
	s.p.mu.Lock()
	s.releaseLocked(pc)
	s.p.wake()
	s.p.mu.Unlock()
}

// deliver hands a filled piece to the stream.
func (s *stream) deliver(pc *piece) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.err != nil || s.finished {
		s.releaseLocked(pc)
		p.wake()
		return
	}
	if pc.off != s.contig {
		s.ahead[pc.off] = pc
		return
	}
	// The frontier moves: a connection waiting at the new frontier may go on, and the
	// sink has work.
	defer p.wake()
	defer s.sinkCond.Signal()
	s.queue = append(s.queue, pc)
	s.contig += int64(len(pc.data))
	for {
		q, ok := s.ahead[s.contig]
		if !ok {
			return
		}
		delete(s.ahead, s.contig)
		s.queue = append(s.queue, q)
		s.contig += int64(len(q.data))
	}
}

// fail stops the stream with err (the first error wins).
func (s *stream) fail(err error) {
	s.p.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.p.cond.Broadcast()
	s.sinkCond.Broadcast()
	s.p.mu.Unlock()
}

// finish tells the sink that no more pieces come.
func (s *stream) finish() {
	s.p.mu.Lock()
	s.finished = true
	s.p.cond.Broadcast()
	s.sinkCond.Broadcast()
	s.p.mu.Unlock()
}

func (s *stream) knownSize() int64 {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return s.size
}

// setSize records the file's size as the server states it, and fails on a contradiction.
func (s *stream) setSize(n int64) error {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if s.size < 0 {
		s.size = n
		return nil
	}
	if s.size != n {
		return &MismatchError{Path: s.j.f.Path, What: "size", Expected: fmt.Sprint(s.size), Actual: fmt.Sprint(n)}
	}
	return nil
}

// sink writes and hashes the pieces in order until the stream is finished or failed.
func (s *stream) sink(cancel context.CancelFunc) error {
	p := s.p
	rep := s.j.c.Progress
	var err error
	for err == nil {
		p.mu.Lock()
		for len(s.queue) == 0 && !s.finished && s.err == nil {
			s.sinkCond.Wait()
		}
		batch := s.queue
		s.queue = nil
		p.mu.Unlock()
		if len(batch) == 0 {
			break
		}
		var n int64
		for _, pc := range batch {
			if err != nil {
				break
			}
			if _, werr := s.w.Write(pc.data); werr != nil {
				// The path is said once: "writing PATH: no space left on device".
				var pe *os.PathError
				if errors.As(werr, &pe) {
					werr = pe.Err
				}
				err = fmt.Errorf("writing %s: %w", s.j.part, werr)
				break
			}
			s.h.Write(pc.data)
			n += int64(len(pc.data))
		}
		s.written += n
		p.mu.Lock()
		for _, pc := range batch {
			s.releaseLocked(pc)
		}
		p.wake()
		p.mu.Unlock()
		rep.Add(s.j.f.Path, n)
		if err == nil && (s.written-s.lastCk >= s.j.c.CheckpointBytes || (s.written > s.lastCk && time.Since(s.lastCkAt) >= s.j.c.CheckpointEvery)) {
			err = s.checkpoint()
		}
	}
	if err != nil {
		s.fail(err)
		cancel()
	}
	// Return what is left (pieces after a gap, or after a failure) to the pool.
	p.mu.Lock()
	for _, pc := range s.queue {
		s.releaseLocked(pc)
	}
	s.queue = nil
	for off, pc := range s.ahead {
		s.releaseLocked(pc)
		delete(s.ahead, off)
	}
	s.finished = true
	p.cond.Broadcast()
	p.mu.Unlock()
	return err
}

// sidecar is the resume record NAME.part.json: how many bytes of the part are hashed, and
// the hash state after them.
type sidecar struct {
	Version int    `json:"version"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	Hashed  int64  `json:"hashed"`
	State   []byte `json:"state"`
}

// checkpoint fsyncs the part and records the hashed prefix in the sidecar, atomically.
func (s *stream) checkpoint() error {
	j := s.j
	if j.f.SHA256 == "" || s.written == 0 {
		return nil
	}
	m, ok := s.h.sha256.(encoding.BinaryMarshaler)
	if !ok {
		return nil
	}
	if err := s.pf.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", j.part, err)
	}
	state, err := m.MarshalBinary()
	if err != nil {
		return fmt.Errorf("saving hash state of %s: %w", j.part, err)
	}
	data, err := json.Marshal(sidecar{Version: 1, Size: j.f.Size, SHA256: j.f.SHA256, Hashed: s.written, State: state})
	if err != nil {
		return fmt.Errorf("saving resume point of %s: %w", j.part, err)
	}
	tmp := j.side + ".tmp"
	if err := writeFileSync(tmp, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, j.side); err != nil {
		return fmt.Errorf("saving resume point of %s: %w", j.part, err)
	}
	s.lastCk = s.written
	s.lastCkAt = time.Now()
	return nil
}

func writeFileSync(path string, data []byte) error {
	// The temporary name is fixed: what an earlier run (or anyone) left there is removed,
	// never written through.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// openPart opens the part file for this attempt. A part left by an earlier run is resumed,
// but only from bytes this run has read and hashed itself: the whole part is hashed again
// from disk (at disk speed, far faster than the network). When a resume record exists, the
// hash state after its recorded prefix must be the recorded one; a difference means the
// bytes on disk changed since they were checked, and the file starts over. It returns the
// file positioned at its end.
func (j *job) openPart(size int64) (pf *os.File, h *hashers, have int64, resumed bool, err error) {
	fresh := func() (*os.File, *hashers, int64, bool, error) {
		_ = os.Remove(j.side)
		// A part is always a new file: whatever is at its name (a symbolic link planted
		// there among them) is removed, never written through.
		if err := os.Remove(j.part); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, 0, false, fmt.Errorf("removing the old %s: %w", j.part, err)
		}
		f, err := os.OpenFile(j.part, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		for try := 0; errors.Is(err, os.ErrNotExist) && try < 3; try++ {
			// Another Fetch into the same folder that just finished removed the
			// empty part folders: make them again.
			if err = os.MkdirAll(filepath.Dir(j.part), 0o755); err == nil {
				f, err = os.OpenFile(j.part, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
			}
		}
		if err != nil {
			return nil, nil, 0, false, fmt.Errorf("creating %s: %w", j.part, err)
		}
		return f, j.newHashers(size), 0, false, nil
	}
	if j.f.SHA256 == "" || j.noRanges {
		return fresh()
	}
	st, err := os.Lstat(j.part)
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 || (size >= 0 && st.Size() > size) {
		return fresh()
	}
	f, err := os.OpenFile(j.part, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fresh()
	}
	h = j.newHashers(size)
	var (
		recorded []byte // the hash state after the recorded prefix, to compare
		hashed   int64
	)
	if sc, ok := j.readSidecar(); ok {
		if sc.Size != size || sc.SHA256 != j.f.SHA256 {
			// The part belongs to another version of the file.
			f.Close()
			j.c.Logf("%s: the part file is of another version; starting over", j.f.Path)
			return fresh()
		}
		// A record whose state is not a sha256 state at all is a damaged record, not a
		// sign of damaged bytes: the part is then hashed and the final digest decides.
		if u, ok := sha256.New().(encoding.BinaryUnmarshaler); ok && sc.Hashed > 0 && sc.Hashed <= st.Size() && u.UnmarshalBinary(sc.State) == nil {
			recorded, hashed = sc.State, sc.Hashed
		}
	}
	j.c.Logf("%s: hashing the %s of the earlier part file", j.f.Path, FormatBytes(st.Size()))
	buf := make([]byte, 1<<20)
	if hashed > 0 {
		if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, hashed), buf); err != nil {
			f.Close()
			return nil, nil, 0, false, fmt.Errorf("reading %s: %w", j.part, err)
		}
		m, ok := h.sha256.(encoding.BinaryMarshaler)
		var state []byte
		if ok {
			state, _ = m.MarshalBinary()
		}
		if !bytes.Equal(state, recorded) {
			f.Close()
			j.c.Logf("%s: the first %s of the part file changed since they were checked; starting over", j.f.Path, FormatBytes(hashed))
			return fresh()
		}
	}
	if tail := st.Size() - hashed; tail > 0 {
		if _, err := io.CopyBuffer(h, io.NewSectionReader(f, hashed, tail), buf); err != nil {
			f.Close()
			return nil, nil, 0, false, fmt.Errorf("reading %s: %w", j.part, err)
		}
	}
	if _, err := f.Seek(st.Size(), io.SeekStart); err != nil {
		f.Close()
		return nil, nil, 0, false, fmt.Errorf("seeking %s: %w", j.part, err)
	}
	return f, h, st.Size(), true, nil
}

func (j *job) readSidecar() (sidecar, bool) {
	var sc sidecar
	data, err := os.ReadFile(j.side)
	if err != nil {
		return sc, false
	}
	if err := json.Unmarshal(data, &sc); err != nil || sc.Version != 1 {
		return sc, false
	}
	return sc, true
}
