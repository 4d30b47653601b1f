package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// outageProxy is a TCP proxy in front of a server that can go down: while it is down its
// port refuses connections (the listener is closed) and every connection it carried is cut,
// as when a host, its DNS name or the path to it disappears for a while.
type outageProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	closed bool
}

func newOutageProxy(t *testing.T, target string) *outageProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &outageProxy{t: t, addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.down()
	})
	return p
}

func (p *outageProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

func (p *outageProxy) pipe(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// down closes the port and cuts every connection.
func (p *outageProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// outage takes the proxy down for d, then listens on the same port again.
func (p *outageProxy) outage(d time.Duration) {
	p.down()
	time.Sleep(d)
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Errorf("listening again on %s: %v", p.addr, err)
		return
	}
	p.serve(ln)
}

// budgetOptions are testOptions with a retry budget that outlasts the scaled outages and
// first waits far too short to cover them: the old fixed count of retries (3, at 20, 40
// and 80 ms) gives up within 140 ms.
func budgetOptions(dest string) Options {
	opt := testOptions(dest)
	opt.RetryWait = 20 * time.Millisecond
	opt.NoProgress = 5 * time.Second
	return opt
}

// TestOutageInTheMiddle: a server that refuses connections, answers 503, or answers 429
// with Retry-After and RateLimit for a while in the middle of a transfer: the download
// waits it out and finishes with the right bytes.
func TestOutageInTheMiddle(t *testing.T) {
	const outage = 1500 * time.Millisecond
	data := randomBytes(t, 4<<20)
	for _, mode := range []string{"refused", "503", "429"} {
		t.Run(mode, func(t *testing.T) {
			fs := newFaultServer(t, map[string][]byte{"w": data})
			url := fs.url("w")
			var proxy *outageProxy
			if mode == "refused" {
				proxy = newOutageProxy(t, strings.TrimPrefix(fs.URL, "http://"))
				url = "http://" + proxy.addr + "/w"
			}
			var downUntil atomic.Int64 // unix nanos; 0: not yet
			var once sync.Once
			var refusedAnswers, early atomic.Int64
			var askMu sync.Mutex
			lastAsk := map[string]int64{} // by Range: when that range was last refused
			fs.configure(func() {
				fs.throttle = time.Millisecond
				fs.onServed = func(total int64) {
					if total < int64(len(data))/3 {
						return
					}
					once.Do(func() {
						downUntil.Store(time.Now().Add(outage).UnixNano())
						if proxy != nil {
							go proxy.outage(outage)
						}
					})
				}
				fs.plan = func(_ int, r *http.Request) action {
					until := downUntil.Load()
					if mode == "refused" || until == 0 || time.Now().UnixNano() >= until {
						return action{}
					}
					now := time.Now().UnixNano()
					refusedAnswers.Add(1)
					if mode == "503" {
						return action{status: http.StatusServiceUnavailable}
					}
					askMu.Lock()
					if last, ok := lastAsk[r.Header.Get("Range")]; ok && time.Duration(now-last) < 900*time.Millisecond {
						// The same range asked again before the second the answer asked for.
						early.Add(1)
					}
					lastAsk[r.Header.Get("Range")] = now
					askMu.Unlock()
					return action{status: http.StatusTooManyRequests, header: http.Header{
						"Retry-After": {"1"},
						"Ratelimit":   {`"resolvers";r=0;t=1`},
					}}
				}
			})
			dest := t.TempDir()
			start := time.Now()
			f := File{URL: url, Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
			res, err := Fetch(context.Background(), []File{f}, budgetOptions(dest))
			if err != nil {
				t.Fatalf("Fetch through a %s outage of %s: %v", mode, outage, err)
			}
			took := time.Since(start)
			if downUntil.Load() == 0 {
				t.Fatal("the outage never began: the test proves nothing")
			}
			if took < outage {
				t.Errorf("finished in %s, shorter than the %s outage: it did not happen in the middle", took, outage)
			}
			if got := readFile(t, dest+"/w.bin"); string(got) != string(data) || res[0].SHA256 != f.SHA256 {
				t.Fatal("the file's bytes differ after the outage")
			}
			if mode != "refused" && refusedAnswers.Load() == 0 {
				t.Errorf("no %s answered during the outage", mode)
			}
			if mode == "429" && early.Load() > 0 {
				t.Errorf("%d requests came back within the second Retry-After asked for", early.Load())
			}
		})
	}
}

// TestFileFailsAlone: a file that exhausts its no-progress budget fails alone; the others
// finish, and the error names every failed file.
func TestFileFailsAlone(t *testing.T) {
	good := randomBytes(t, 3<<20)
	bad := randomBytes(t, 2<<20)
	fs := newFaultServer(t, map[string][]byte{"good": good, "bad1": bad, "bad2": bad})
	fs.configure(func() {
		fs.throttle = 2 * time.Millisecond // the good file takes longer than the budget
		fs.plan = func(_ int, r *http.Request) action {
			if strings.HasPrefix(r.URL.Path, "/bad") {
				return action{status: http.StatusBadGateway}
			}
			return action{}
		}
	})
	dest := t.TempDir()
	opt := testOptions(dest)
	opt.RetryWait = 20 * time.Millisecond
	opt.NoProgress = 300 * time.Millisecond
	files := []File{
		{URL: fs.url("bad1"), Path: "bad1.bin", Size: int64(len(bad)), SHA256: sha256Hex(bad)},
		{URL: fs.url("good"), Path: "good.bin", Size: int64(len(good)), SHA256: sha256Hex(good)},
		{URL: fs.url("bad2"), Path: "bad2.bin", Size: int64(len(bad)), SHA256: sha256Hex(bad)},
	}
	res, err := Fetch(context.Background(), files, opt)
	var fe *FilesError
	if !errors.As(err, &fe) {
		t.Fatalf("Fetch = %v, want a *FilesError", err)
	}
	if len(fe.Failed) != 2 || fe.Total != 3 {
		t.Fatalf("failed = %d of %d, want 2 of 3: %v", len(fe.Failed), fe.Total, err)
	}
	for _, want := range []string{"2 of 3 files failed", "bad1.bin", "bad2.bin", "502", "no-progress budget"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if len(res) != 1 || res[0].Path != "good.bin" {
		t.Fatalf("results = %+v, want good.bin alone", res)
	}
	if got := readFile(t, dest+"/good.bin"); string(got) != string(good) {
		t.Fatal("good.bin differs")
	}
}

// TestCheckpointByTime: on a slow link the resume record is written every CheckpointEvery,
// not only every CheckpointBytes, so that a killed run loses little.
func TestCheckpointByTime(t *testing.T) {
	data := randomBytes(t, 2<<20)
	fs := newFaultServer(t, map[string][]byte{"w": data})
	fs.configure(func() { fs.throttle = 10 * time.Millisecond }) // about 3 MB/s
	dest := t.TempDir()
	opt := testOptions(dest)
	opt.Conns = 1
	opt.CheckpointBytes = 1 << 40
	opt.CheckpointEvery = 100 * time.Millisecond
	f := File{URL: fs.url("w"), Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
	_, side := partPaths(dest, f.Path)
	seen := make(chan bool, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				seen <- false
				return
			default:
			}
			if b, err := os.ReadFile(side); err == nil && len(b) > 0 {
				seen <- true
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if _, err := Fetch(context.Background(), []File{f}, opt); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if !<-seen {
		t.Fatal("no resume record was written while the file downloaded")
	}
}

// TestCDNRateLimited: the CDN a file redirected to answers 429 with Retry-After: the
// downloader waits what it asks and keeps the CDN URL (a 429 is no expired signature),
// rather than asking the origin again at once.
func TestCDNRateLimited(t *testing.T) {
	data := randomBytes(t, 2<<20)
	fs := newFaultServer(t, map[string][]byte{"t": data})
	var limited atomic.Int64
	limited.Store(4)
	fs.configure(func() {
		fs.plan = func(n int, r *http.Request) action {
			if r.URL.Path == "/w" {
				return action{redirect: fs.url("t")}
			}
			if n > 0 && limited.Add(-1) >= 0 {
				return action{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"1"}}}
			}
			return action{}
		}
	})
	opt := testOptions(t.TempDir())
	// A budget longer than the wait asked for: one shorter fails at once (TestRetryAfterBeyondTheBudget).
	opt.NoProgress = 5 * time.Second
	start := time.Now()
	f := File{URL: fs.url("w"), Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
	if _, err := Fetch(context.Background(), []File{f}, opt); err != nil {
		t.Fatalf("Fetch through a CDN that rate-limits: %v", err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("finished in %s: the CDN's Retry-After of 1 s was not waited", took)
	}
	origin := 0
	for _, r := range fs.requests() {
		if r.path == "w" {
			origin++
		}
	}
	// Each connection asks the origin once before the first answer names the CDN URL.
	if origin > opt.Conns {
		t.Errorf("the origin was asked %d times for %d connections: a 429 from the CDN dropped its URL", origin, opt.Conns)
	}
}

type refuseRT struct{ err error }

func (r refuseRT) RoundTrip(*http.Request) (*http.Response, error) { return nil, r.err }

// TestNoRetryFailsAtOnce: a transport error that wraps ErrNoRetry (a source given up for
// the run) fails the file at once instead of retrying it for its no-progress budget.
func TestNoRetryFailsAtOnce(t *testing.T) {
	opt := testOptions(t.TempDir())
	opt.NoProgress = time.Minute
	opt.Client = &http.Client{Transport: refuseRT{fmt.Errorf("%w: the registry is given up", ErrNoRetry)}}
	start := time.Now()
	_, err := Fetch(context.Background(), []File{{URL: "http://127.0.0.1:1/x", Path: "x.bin", Size: 10, SHA256: sha256Hex([]byte("0123456789"))}}, opt)
	if !errors.Is(err, ErrNoRetry) || time.Since(start) > 5*time.Second {
		t.Fatalf("Fetch = %v after %s, want ErrNoRetry at once", err, time.Since(start))
	}
}

// Retries: -1 turns retries off: a refused connection fails the file at once, not after
// the no-progress budget.
func TestRetriesOffFailsAtOnce(t *testing.T) {
	opt := testOptions(t.TempDir())
	opt.NoProgress = time.Minute
	opt.Retries = -1
	start := time.Now()
	_, err := Fetch(context.Background(), []File{{URL: "http://127.0.0.1:1/x", Path: "x.bin", Size: 10, SHA256: sha256Hex([]byte("0123456789"))}}, opt)
	if err == nil || !strings.Contains(err.Error(), "retries are off") || time.Since(start) > 10*time.Second {
		t.Fatalf("Fetch = %v after %s, want a failure at once saying retries are off", err, time.Since(start))
	}
}
