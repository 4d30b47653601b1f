package fetch

import (
	"fmt"
	"io"
	"time"
)

// DefaultMinRateWindow is the window over which Options.MinRate is measured when
// Options.MinRateWindow is 0.
const DefaultMinRateWindow = 30 * time.Second

// SlowError is the cause (context.Cause) with which a request's context is cancelled when
// its answer came slower than Options.MinRate over Options.MinRateWindow: a trickle that
// never stalls. A RoundTripper under Fetch (a registry's client) can tell it, as a
// StallError, from the other cancellations.
type SlowError struct {
	// Got is the bytes received over Window; MinRate the bytes per second asked for.
	Got     int64
	Window  time.Duration
	MinRate int64
}

// Error implements error.
func (e *SlowError) Error() string {
	return fmt.Sprintf("too slow: %s in %s, below the minimum rate of %s/s", FormatBytes(e.Got), e.Window, FormatBytes(e.MinRate))
}

// rateReader fails a body that delivers fewer than minRate bytes per second, measured over
// each window of reading time. The time a connection waits for buffer space (the reader
// does not read then) is not counted: pause and resume bracket it.
type rateReader struct {
	r       io.Reader
	minRate int64
	window  time.Duration
	// start is when the current window began; got the bytes read in it.
	start  time.Time
	got    int64
	paused time.Time
	slow   func(*SlowError)
}

func newRateReader(r io.Reader, minRate int64, window time.Duration, slow func(*SlowError)) io.Reader {
	if minRate <= 0 {
		return r
	}
	if window <= 0 {
		window = DefaultMinRateWindow
	}
	return &rateReader{r: r, minRate: minRate, window: window, start: time.Now(), slow: slow}
}

func (rr *rateReader) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	rr.got += int64(n)
	if now := time.Now(); now.Sub(rr.start) >= rr.window {
		elapsed := now.Sub(rr.start)
		if float64(rr.got) < float64(rr.minRate)*elapsed.Seconds() {
			se := &SlowError{Got: rr.got, Window: elapsed.Round(time.Second), MinRate: rr.minRate}
			rr.slow(se)
			return n, se
		}
		rr.start, rr.got = now, 0
	}
	return n, err
}

// pause stops the clock while the connection waits for buffer space; resume starts it
// again, moving the window's start by the time paused.
func (rr *rateReader) pause() { rr.paused = time.Now() }

func (rr *rateReader) resume() {
	if !rr.paused.IsZero() {
		rr.start = rr.start.Add(time.Since(rr.paused))
		rr.paused = time.Time{}
	}
}
