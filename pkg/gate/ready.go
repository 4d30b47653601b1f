package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// probeTimeout bounds one readiness poll, so that a server that accepts connections and
// never answers is reported as "timed out" every so often instead of holding the wait
// silent for minutes.
const probeTimeout = 20 * time.Second

const noAnswer = "no answer yet"

// WaitStatus is what a readiness wait has seen so far.
type WaitStatus struct {
	// Elapsed is the time since the wait began; Timeout the time it may take.
	Elapsed, Timeout time.Duration
	// Last is what the last poll saw: "connection refused", "HTTP 503", "HTTP 503:
	// loading", "timed out".
	Last string
	// Polls is the number of polls made.
	Polls int
}

// String is the status in a few words, e.g. "not ready after 1m30s of 20m0s (last:
// connection refused)".
func (s WaitStatus) String() string {
	return fmt.Sprintf("not ready after %s of %s (last: %s)", roundElapsed(s.Elapsed), s.Timeout, s.Last)
}

// roundElapsed rounds a wait's elapsed time to what it says: microseconds under a
// millisecond and milliseconds under a second (a first poll's "212ms", never "0s" for a
// wait that has begun), tenths of a second under ten, whole seconds past that.
func roundElapsed(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// WaitReady polls /health_generate (or /health where the server answers 404 to it) with
// backoff until it answers 200, the ready timeout passes, ctx ends, or cfg.Failed reports
// the service failed. After every poll that did not find the server ready it calls
// cfg.Waiting. It returns the time waited.
func WaitReady(ctx context.Context, cfg Config) (time.Duration, error) {
	cfg = cfg.withDefaults()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	path := "/health_generate"
	delay := cfg.PollInitial
	last := noAnswer
	polls := 0
	for {
		pctx, pcancel := context.WithTimeout(ctx, min(cfg.RequestTimeout, probeTimeout))
		code, body, err := probe(pctx, cfg, path)
		pcancel()
		polls++
		switch {
		case ctx.Err() != nil:
			// The wait ended during this poll: keep what the last complete poll saw.
			if last == noAnswer && err != nil {
				last = fmt.Sprintf("%s: %s", path, seen(err))
			}
		case err == nil && code == http.StatusOK:
			return time.Since(start), nil
		case err == nil && code == http.StatusNotFound && path == "/health_generate":
			path = "/health"
			last = "/health_generate: HTTP 404"
			continue
		case err == nil:
			last = fmt.Sprintf("%s: HTTP %d", path, code)
			if body != "" {
				last += ": " + body
			}
		default:
			last = fmt.Sprintf("%s: %s", path, seen(err))
		}
		if cfg.Waiting != nil && ctx.Err() == nil {
			cfg.Waiting(WaitStatus{Elapsed: time.Since(start), Timeout: cfg.ReadyTimeout, Last: last, Polls: polls})
		}
		if cfg.Failed != nil {
			failed, lines, ferr := cfg.Failed(ctx)
			if ferr == nil && failed {
				msg := "service failed while waiting for readiness"
				if lines = strings.TrimSpace(lines); lines != "" {
					msg += ":\n" + lines
				}
				return time.Since(start), errors.New(msg)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if parentDone(ctx, start, cfg.ReadyTimeout) {
				return time.Since(start), fmt.Errorf("waiting for readiness: %w", context.Cause(ctx))
			}
			return time.Since(start), fmt.Errorf("not ready after %s (last: %s)", cfg.ReadyTimeout, last)
		case <-t.C:
		}
		delay = min(delay*2, cfg.PollMax)
	}
}

// parentDone tells a cancelled caller from a ready timeout that ran out.
func parentDone(ctx context.Context, start time.Time, timeout time.Duration) bool {
	return !errors.Is(ctx.Err(), context.DeadlineExceeded) && time.Since(start) < timeout
}

// probe asks path once; it returns the status code and, for an answer other than 200, the
// first line of a short body (SGLang says what it is doing while it loads).
func probe(ctx context.Context, cfg Config, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+path, nil)
	if err != nil {
		return 0, "", err
	}
	auth(req, cfg)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	body := ""
	if resp.StatusCode != http.StatusOK {
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if cfg.APIKey != "" {
			line = strings.ReplaceAll(line, cfg.APIKey, "[redacted]")
		}
		if line != "" {
			body = Sample(line, 60)
		}
	}
	return resp.StatusCode, body, nil
}

// seen names a transport error the way an operator says it: "connection refused",
// "timed out", else the error without Go's request line.
func seen(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	}
	return shortErr(err)
}

// WaitReporter tells a person or a log what a readiness wait is doing: use its Update as
// Config.Waiting and call Stop when the wait is over. On a terminal it keeps one status
// line up to date (rewritten every second); elsewhere it reports the elapsed time and
// what was last seen as soon as the first poll fails, then at least every Every, whatever
// the polls do.
type WaitReporter struct {
	line     func(string, WaitStatus)
	live     io.Writer
	label    string
	every    time.Duration
	now      func() time.Time
	start    time.Time
	mu       sync.Mutex
	last     WaitStatus
	seen     bool
	lastLine time.Time
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// DefaultWaitEvery is how often a WaitReporter on a pipe writes a line.
const DefaultWaitEvery = 30 * time.Second

// NewWaitReporter starts a reporter for a wait on label (e.g. the server's URL). With
// live set (a terminal), the status line is drawn there; otherwise each report goes to
// line, every `every` (DefaultWaitEvery when 0): the sentence ("waiting for URL: not
// ready after 30s of 20m0s (last: ...)") and the status it says, with Elapsed as of now,
// for a logger to write as fields.
func NewWaitReporter(label string, live io.Writer, line func(text string, s WaitStatus), every time.Duration) *WaitReporter {
	if every <= 0 {
		every = DefaultWaitEvery
	}
	if line == nil {
		line = func(string, WaitStatus) {}
	}
	r := &WaitReporter{line: line, live: live, label: label, every: every, now: time.Now,
		stop: make(chan struct{}), done: make(chan struct{})}
	r.start = r.now()
	tick := every
	if live != nil {
		tick = time.Second
	}
	go r.loop(tick)
	return r
}

func (r *WaitReporter) loop(tick time.Duration) {
	defer close(r.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.tick()
		}
	}
}

// Update records what the wait saw; it is Config.Waiting's shape. The first status is
// reported at once.
func (r *WaitReporter) Update(s WaitStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.seen
	r.last, r.seen = s, true
	if r.live != nil {
		r.drawLocked()
		return
	}
	if first {
		r.emitLocked()
	}
}

func (r *WaitReporter) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen {
		return
	}
	if r.live != nil {
		r.drawLocked()
		return
	}
	if r.now().Sub(r.lastLine) >= r.every-r.every/10 {
		r.emitLocked()
	}
}

// current is the status with the elapsed time as of now (polls may be minutes apart).
func (r *WaitReporter) current() WaitStatus {
	s := r.last
	s.Elapsed = r.now().Sub(r.start)
	return s
}

func (r *WaitReporter) text(s WaitStatus) string {
	return fmt.Sprintf("waiting for %s: %s", r.label, s)
}

func (r *WaitReporter) emitLocked() {
	r.lastLine = r.now()
	s := r.current()
	r.line(r.text(s), s)
}

func (r *WaitReporter) drawLocked() {
	fmt.Fprintf(r.live, "\r\033[K%s", r.text(r.current()))
}

// Stop ends the reports; on a terminal it clears the status line.
func (r *WaitReporter) Stop() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live != nil && r.seen {
		fmt.Fprint(r.live, "\r\033[K")
	}
}
