package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
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
