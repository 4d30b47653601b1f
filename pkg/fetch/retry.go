// Retries and waits: a range is asked again from the byte reached after a transient
// failure, within the no-progress budget.

package fetch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sglprov/sglprov/pkg/redact"
)

// fetchRange downloads bytes [a, b) (b < 0: to the end) with retries, delivering them to s.
// A refused or dropped connection, a 5xx, 408 or 429 answer or a stall is retried from the
// byte reached, after a wait that doubles (with jitter, up to 10s) and starts again
// whenever bytes arrived, and that is at least what a Retry-After or RateLimit header asks;
// it gives up once the file has received no byte for NoProgress.
func (j *job) fetchRange(ctx context.Context, s *stream, a, b int64) error {
	_, err := j.fetchRangeTo(ctx, s, a, b)
	return err
}

// fetchRangeTo is fetchRange that also returns the position reached: past b when a 200
// answer to the first request of a file carried the whole file, or the end of a file
// shorter than b.
func (j *job) fetchRangeTo(ctx context.Context, s *stream, a, b int64) (int64, error) {
	pos := a
	wait := j.c.RetryWait
	for {
		before := pos
		err := j.request(ctx, s, &pos, b)
		if err == nil {
			return pos, nil
		}
		if ctx.Err() != nil {
			return pos, ctx.Err()
		}
		var te *transientError
		if !errors.As(err, &te) {
			return pos, err
		}
		if pos > before {
			wait = j.c.RetryWait
		}
		if j.c.Retries < 0 {
			return pos, fmt.Errorf("downloading %s from %s: %w (retries are off)", j.f.Path, redact.URL(j.f.URL), te.err)
		}
		idle := time.Since(time.Unix(0, j.lastByte.Load()))
		left := j.c.NoProgress - idle
		if left <= 0 {
			return pos, fmt.Errorf("downloading %s from %s: no byte for %s, the no-progress budget: giving up this file after: %w",
				j.f.Path, redact.URL(j.f.URL), idle.Round(time.Second), te.err)
		}
		if j.noRanges && pos > 0 {
			// The server cannot continue a range: start the file over.
			return pos, errRangeIgnored
		}
		if te.after > left {
			// Waiting would outlast the budget: say so now rather than after it.
			return pos, fmt.Errorf("downloading %s from %s: %w, and its Retry-After or RateLimit asks to wait %s, more than the %s left of the no-progress budget (no_progress_timeout %s): giving up this file now",
				j.f.Path, redact.URL(j.f.URL), te.err, te.after.Round(time.Second), left.Round(time.Second), j.c.NoProgress)
		}
		d := jitter(wait)
		if te.after > d {
			d = te.after
		}
		d = min(d, left)
		if te.after > 0 {
			j.c.Logf("%s: the server asks to wait %s (%v); retrying from byte %d in %s, %s left of the no-progress budget", j.f.Path, te.after, te.err, pos, d.Round(time.Millisecond), left.Round(time.Second))
		} else {
			j.c.Logf("%s: retrying from byte %d in %s after: %v; %s left of the no-progress budget", j.f.Path, pos, d.Round(time.Millisecond), te.err, left.Round(time.Second))
		}
		if !sleepCtx(ctx, d) {
			return pos, ctx.Err()
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// jitter returns a wait between d/2 and d, so that connections that failed together do
// not all come back at the same instant.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// transientError is an error worth retrying (dropped connection, 5xx, stall); after is
// the wait the server asked for (Retry-After, RateLimit), or 0.
type transientError struct {
	err   error
	after time.Duration
}

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }
