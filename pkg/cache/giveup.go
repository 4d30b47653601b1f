package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/sglprov/sglprov/pkg/fetch"
)

// stallNoter tells the registry when a read of a body fails because pkg/fetch cancelled
// the request for a stall.
type stallNoter struct {
	io.ReadCloser
	ctx context.Context
	r   *Registry
}

// Read reads the body, noting a stall when the read fails.
func (s *stallNoter) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		s.r.noteStall(s.ctx)
	}
	return n, err
}

// Close closes the body; one closed after pkg/fetch cancelled its request for a stall or
// a trickle below the minimum rate (the reader stopped reading) gives up on the registry.
func (s *stallNoter) Close() error {
	s.r.noteStall(s.ctx)
	return s.ReadCloser.Close()
}

// noteStall gives up on the registry for the rest of the run when ctx was cancelled for a
// stall (no byte, headers included, for the stall timeout) or a trickle (below
// cache.min_rate), and says so once.
func (r *Registry) noteStall(ctx context.Context) {
	var why string
	var se *fetch.StallError
	var slow *fetch.SlowError
	switch cause := context.Cause(ctx); {
	case errors.As(cause, &se):
		why = fmt.Sprintf("sent no byte of a blob (or of its answer's headers) for %s", se.Timeout)
	case errors.As(cause, &slow):
		why = fmt.Sprintf("sent %s of a blob in %s, below cache.min_rate (%s/s)", fetch.FormatBytes(slow.Got), slow.Window, fetch.FormatBytes(slow.MinRate))
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down != nil {
		return
	}
	r.down = fmt.Errorf("the registry %s %s; it is %w", r, why, ErrNotAskedAgain)
	r.logf("the registry %s %s: it is not asked again in this run, and every file still to fetch comes from its origin (the hub, or a build)", r, why)
}

// bounded returns ctx limited to the registry's timeout, and a function that turns the
// error of the exchange into one that says the registry did not answer, when that is what
// happened, and remembers it: a registry that accepts connections and never answers costs
// one timeout per run, not one per step or per file. It fails at once when the registry
// already did not answer.
func (r *Registry) bounded(ctx context.Context) (context.Context, func(error) error, error) {
	if err := r.unreachable(); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	return cctx, func(err error) error {
		defer cancel()
		var ne net.Error
		if err == nil || ctx.Err() != nil || !(cctx.Err() != nil || errors.As(err, &ne) && ne.Timeout()) {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down == nil {
			r.down = fmt.Errorf("the registry %s did not answer within %s; it is %w: %w", r, r.timeout, ErrNotAskedAgain, context.DeadlineExceeded)
		}
		return r.down
	}, nil
}

// unreachable is the error of a registry that did not answer earlier in this run, or nil.
func (r *Registry) unreachable() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down
}

// GaveUp returns why the registry is not asked again in this run, or nil.
func (r *Registry) GaveUp() error { return r.unreachable() }
