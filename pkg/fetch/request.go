// One HTTP request for a byte range: the Range header, the answer's status and
// Content-Range, and the body read piece by piece under the stall timer.

package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sglprov/sglprov/pkg/httpwait"
	"github.com/sglprov/sglprov/pkg/redact"
)

// stallReader resets the stall timer whenever bytes arrive.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	return n, err
}

// request makes one HTTP request for [*pos, b) and delivers what arrives, advancing *pos.
func (j *job) request(ctx context.Context, s *stream, pos *int64, b int64) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var stalled atomic.Bool
	var slowed atomic.Pointer[SlowError]
	stall := j.c.StallTimeout
	timer := time.AfterFunc(stall, func() { stalled.Store(true); cancel(&StallError{Timeout: stall}) })
	defer timer.Stop()
	transient := func(err error) error {
		if se := slowed.Load(); se != nil {
			return &transientError{err: se}
		}
		if stalled.Load() {
			return &transientError{err: fmt.Errorf("stalled: no bytes for %s", stall)}
		}
		return &transientError{err: err}
	}

	size := s.knownSize()
	ranged := *pos > 0 || (b >= 0 && b != size)
	resp, err := j.send(rctx, *pos, b, ranged, transient)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	want, err := j.answerLength(resp, s, *pos, b, ranged, size, transient)
	if err != nil {
		return err
	}

	var body io.Reader = &stallReader{r: j.bound(resp.Body, s, *pos, want), timer: timer, d: stall}
	body = newRateReader(body, j.c.MinRate, j.c.MinRateWindow, func(se *SlowError) { slowed.Store(se); cancel(se) })
	return j.readBody(ctx, s, body, pos, want, timer, stall, transient)
}

// send asks for [pos, b) (no Range header unless ranged), at the URL the file last
// redirected to when there is one, and notes where the answer came from.
func (j *job) send(rctx context.Context, pos, b int64, ranged bool, transient func(error) error) (*http.Response, error) {
	// After a redirect, later ranges of the file go straight to where it led (a CDN URL
	// signed for a while), saving a round trip per range; when that stops working the
	// original URL is asked again.
	target, cached := j.f.URL, false
	if t := j.target.Load(); t != nil {
		target, cached = *t, true
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("downloading %s: bad URL %s", j.f.Path, redact.URL(j.f.URL))
	}
	if ranged {
		if b >= 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", pos, b-1))
		} else {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-", pos))
		}
	}
	req.Header.Set("Accept-Encoding", "identity")
	j.c.authorize(req)
	resp, err := j.c.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, ErrNoRetry) || httpwait.IsRedirectError(err) {
			return nil, fmt.Errorf("downloading %s from %s: %w", j.f.Path, redact.URL(j.f.URL), err)
		}
		if cached {
			j.target.Store(nil)
		}
		var dns *net.DNSError
		if errors.As(err, &dns) && j.c.DNSError != nil && j.c.dnsSaid.CompareAndSwap(false, true) {
			j.c.DNSError(dns.Name, err)
		}
		return nil, transient(fmt.Errorf("requesting %s: %w", redact.URL(j.f.URL), err))
	}
	if cached && resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
		resp.Body.Close()
		j.target.Store(nil)
		return nil, transient(fmt.Errorf("redirect target of %s answered %s", redact.URL(j.f.URL), resp.Status))
	}
	if !cached && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent) {
		if final := resp.Request.URL.String(); final != j.f.URL {
			j.target.Store(&final)
		}
	}
	return resp, nil
}

// answerLength checks the answer's status and range against what was asked and returns
// how many bytes it should carry (-1: up to its end), noting the file's size when the
// answer states it.
func (j *job) answerLength(resp *http.Response, s *stream, pos, b int64, ranged bool, size int64, transient func(error) error) (int64, error) {
	want := int64(-1) // bytes this answer should carry
	switch {
	case resp.StatusCode == http.StatusPartialContent && ranged:
		start, end, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			return -1, transient(fmt.Errorf("answer from %s: %w", redact.URL(j.f.URL), err))
		}
		// A range may end early only where the file ends (a file of unknown size that is
		// shorter than the first range asked for).
		short := total >= 0 && end == total-1 && end < b-1
		if start != pos || (b >= 0 && end != b-1 && !short) {
			return -1, transient(fmt.Errorf("answer from %s has range %d-%d, asked %d-%d", redact.URL(j.f.URL), start, end, pos, b-1))
		}
		if total >= 0 {
			if err := s.setSize(total); err != nil {
				return -1, err
			}
		}
		want = end + 1 - start
	case resp.StatusCode == http.StatusOK && ranged && !(pos == 0 && size < 0):
		return -1, errRangeIgnored
	case resp.StatusCode == http.StatusOK:
		if ranged {
			// The first request for a file of unknown size: the whole file comes on this
			// connection, and the server cannot continue a range.
			j.noRanges = true
		}
		if resp.ContentLength >= 0 {
			if err := s.setSize(resp.ContentLength); err != nil {
				return -1, err
			}
			want = resp.ContentLength
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && ranged && pos == 0 && size < 0:
		// The first range of a file of unknown size is refused: an empty file.
		return -1, errWholeFile
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && ranged && (b < 0 || size < 0):
		return -1, errStartOver
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout:
		return -1, &transientError{err: fmt.Errorf("%s answered %s", redact.URL(j.f.URL), resp.Status), after: httpwait.ServerWait(resp.Header, time.Now())}
	default:
		return -1, newStatusError(j.f.Path, j.f.URL, resp)
	}
	return want, nil
}

// readBody reads the answer piece by piece into s from *pos, advancing it, until want
// bytes (want < 0: the end of the body); the stall timer stops while it waits for a piece.
func (j *job) readBody(ctx context.Context, s *stream, body io.Reader, pos *int64, want int64, timer *time.Timer, stall time.Duration, transient func(error) error) error {
	rate, _ := body.(*rateReader)
	got := int64(0)
	for want < 0 || got < want {
		timer.Stop()
		if rate != nil {
			rate.pause()
		}
		pc, err := s.acquire(ctx, *pos)
		if err != nil {
			return err
		}
		if rate != nil {
			rate.resume()
		}
		timer.Reset(stall)
		buf := pc.buf
		if want >= 0 && int64(len(buf)) > want-got {
			buf = buf[:want-got]
		}
		n, rerr := io.ReadFull(body, buf)
		if n > 0 {
			j.net.Add(int64(n))
			j.lastByte.Store(time.Now().UnixNano())
			pc.data = buf[:n]
			pc.off = *pos
			s.deliver(pc)
			*pos += int64(n)
			got += int64(n)
		} else {
			s.release(pc)
		}
		if rerr != nil {
			if be := (*boundError)(nil); errors.As(rerr, &be) {
				return be.err
			}
			if se := (*SlowError)(nil); errors.As(rerr, &se) {
				return transient(se)
			}
			if want < 0 && (rerr == io.EOF || rerr == io.ErrUnexpectedEOF) {
				if err := s.setSize(*pos); err != nil {
					return err
				}
				return nil
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				return transient(fmt.Errorf("connection closed after %d of %d bytes", got, want))
			}
			return transient(fmt.Errorf("reading from %s: %w", redact.URL(j.f.URL), rerr))
		}
	}
	return nil
}

// parseContentRange parses "bytes START-END/TOTAL" (TOTAL may be "*", returned as -1).
func parseContentRange(v string) (start, end, total int64, err error) {
	var totalStr string
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
	}
	rng, totalStr, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
	}
	if _, err := fmt.Sscanf(rng, "%d-%d", &start, &end); err != nil || start < 0 || end < start {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
	}
	total = -1
	if totalStr != "*" {
		if _, err := fmt.Sscanf(totalStr, "%d", &total); err != nil {
			return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
		}
	}
	return start, end, total, nil
}
