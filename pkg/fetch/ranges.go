// One attempt at a file: its byte ranges spread over several connections, or one
// connection when the size is unknown or the server cannot continue a range.

package fetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// attempt makes one attempt at the whole file: it opens (or resumes) the part file, runs
// the connections and the in-order writer, and renames the part when it is complete and
// matches.
func (j *job) attempt(ctx context.Context, first bool) error {
	if err := os.MkdirAll(filepath.Dir(j.part), 0o755); err != nil {
		return fmt.Errorf("creating folder for the part file of %s: %w", j.f.Path, err)
	}
	size := j.f.Size
	pf, h, have, resumed, err := j.openPart(size)
	for try := 0; err == nil; try++ {
		// Held while the attempt writes: gc and remove leave a part a download holds.
		if err = holdPart(pf, j.part); err == nil || !errors.Is(err, errPartGone) || try == 2 {
			break
		}
		pf.Close()
		pf, h, have, resumed, err = j.openPart(size)
	}
	if err != nil {
		if pf != nil {
			pf.Close()
		}
		return err
	}
	defer pf.Close()
	if first {
		j.result.Resumed = resumed
		j.c.Progress.Start(j.f.Path, size, have)
		if resumed {
			j.c.Logf("%s: resuming from byte %d", j.f.Path, have)
		}
	} else {
		j.c.Progress.Start(j.f.Path, size, have)
	}

	s := newStream(j, pf, h, have, size)
	if size < 0 || size > have {
		parent := ctx
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		sinkErr := make(chan error, 1)
		go func() { sinkErr <- s.sink(cancel) }()
		var netErr error
		var once sync.Once
		fail := func(err error) {
			once.Do(func() { netErr = err })
			if parent.Err() == nil {
				// A real failure stops the other connections. When the caller cancelled,
				// the connections still hand over what they read, for the next run.
				s.fail(err)
			}
			cancel()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.fetchAll(ctx, s, have, size, fail)
		}()
		wg.Wait()
		s.finish()
		err := <-sinkErr
		cancel()
		// The first cause ends the attempt: a write error (a full disk) cancels the
		// connections, and their "context canceled" must not hide it.
		if netErr != nil && (err == nil || !errors.Is(netErr, context.Canceled)) {
			err = netErr
		}
		if err != nil {
			j.keepPart(pf, s, err)
			return err
		}
	}
	return j.finalize(pf, s)
}

// keepPart keeps what arrived in order for the next run after a failed attempt, unless
// the part is going to be thrown away anyway.
func (j *job) keepPart(pf *os.File, s *stream, err error) {
	if s.written == 0 {
		pf.Close()
		j.removePart()
	} else if !errors.Is(err, errRangeIgnored) && !errors.Is(err, errStartOver) && !errors.Is(err, errWholeFile) {
		if cerr := s.checkpoint(); cerr != nil {
			j.c.Logf("%s: saving resume point: %v", j.f.Path, cerr)
		}
	}
}

// spread downloads [from, size) of a file of known size: in parallel ranges when
// what this attempt fetches (from have on) is large enough, else on one connection.
func (j *job) spread(ctx context.Context, s *stream, have, from, size int64, fail func(error)) {
	if j.noRanges || size-have < j.c.MinChunk || j.c.Conns == 1 {
		if err := j.fetchRange(ctx, s, from, size); err != nil {
			fail(err)
		}
		return
	}
	var next atomic.Int64
	next.Store(from)
	conns := j.c.Conns
	if n := (size - from + j.c.ChunkSize - 1) / j.c.ChunkSize; int64(conns) > n {
		conns = int(n)
	}
	var cw sync.WaitGroup
	for range conns {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for ctx.Err() == nil {
				a := next.Add(j.c.ChunkSize) - j.c.ChunkSize
				if a >= size {
					return
				}
				b := min(a+j.c.ChunkSize, size)
				if err := j.fetchRange(ctx, s, a, b); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	cw.Wait()
}

// fetchAll runs the connections of one attempt at the file from byte have: spread over
// ranges when the size is known, else on one connection, or, after a first chunk that
// states the size, as for a known size. fail is told each connection's error.
func (j *job) fetchAll(ctx context.Context, s *stream, have, size int64, fail func(error)) {
	switch {
	case size >= 0:
		j.spread(ctx, s, have, have, size, fail)
	case j.noRanges || j.c.Conns == 1:
		if err := j.fetchRange(ctx, s, have, -1); err != nil {
			fail(err)
		}
	default:
		// The size is unknown: ask for the first chunk; the answer states the
		// size (Content-Range, or the Content-Length of a 200 that carries the
		// whole file), and the rest is fetched as for a known size.
		end := have + j.c.ChunkSize
		reached, err := j.fetchRangeTo(ctx, s, have, end)
		if err != nil {
			fail(err)
			return
		}
		switch n := s.knownSize(); {
		case n >= 0 && reached < n:
			j.spread(ctx, s, have, reached, n, fail)
		case n < 0:
			// Still unknown (Content-Range "bytes A-B/*"): the rest on one connection.
			if err := j.fetchRange(ctx, s, reached, -1); err != nil {
				fail(err)
			}
		}
	}
}
