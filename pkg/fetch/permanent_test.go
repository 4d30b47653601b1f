package fetch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// permanentOptions give a file the default ten-minute budget: what must fail at once
// fails within seconds, and what is retried would hold the test for minutes.
func permanentOptions(dest string) Options {
	opt := testOptions(dest)
	opt.NoProgress = 10 * time.Minute
	opt.RetryWait = 50 * time.Millisecond
	return opt
}

// TestPermanentRedirectsFailAtOnce: a redirect to file://, a redirect loop, and a chain
// longer than the redirect limit are answers no retry can change: the file fails at once,
// saying which hop and why, instead of being asked again for its whole budget.
func TestPermanentRedirectsFailAtOnce(t *testing.T) {
	data := randomBytes(t, 4096)
	for _, tc := range []struct {
		name string
		plan func(fs *faultServer) func(int, *http.Request) action
		want string
	}{
		{"file scheme", func(fs *faultServer) func(int, *http.Request) action {
			return func(int, *http.Request) action { return action{redirect: "file:///etc/passwd"} }
		}, `"file" URL`},
		{"loop", func(fs *faultServer) func(int, *http.Request) action {
			return func(_ int, r *http.Request) action {
				if r.URL.Path == "/w" {
					return action{redirect: fs.url("a")}
				}
				return action{redirect: fs.url("w")}
			}
		}, "redirect loop"},
		{"endless chain", func(fs *faultServer) func(int, *http.Request) action {
			return func(n int, r *http.Request) action {
				return action{redirect: fs.url(fmt.Sprintf("hop%d-%d", n, time.Now().UnixNano()))}
			}
		}, "more than 10 redirects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFaultServer(t, map[string][]byte{"w": data})
			fs.configure(func() { fs.plan = tc.plan(fs) })
			var mu sync.Mutex
			var logged []string
			opt := permanentOptions(t.TempDir())
			opt.Logf = func(format string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				logged = append(logged, fmt.Sprintf(format, args...))
			}
			start := time.Now()
			f := File{URL: fs.url("w"), Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
			_, err := Fetch(context.Background(), []File{f}, opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not retried") {
				t.Fatalf("Fetch = %v, want an error with %q that says it is not retried", err, tc.want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("failed after %s: a permanent redirect was retried", took)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(logged) > 0 {
				t.Errorf("a permanent redirect was retried: %q", logged)
			}
		})
	}
}

// TestDigestMismatchFetchedTwiceAtMost: a server whose bytes never match the listed sha256
// is asked for the file twice (once more after the first mismatch), not four times; the
// error names the expected and the actual digest.
func TestDigestMismatchFetchedTwiceAtMost(t *testing.T) {
	data := randomBytes(t, 8192)
	fs := newFaultServer(t, map[string][]byte{"w": data})
	want := strings.Repeat("ab", 32)
	opt := testOptions(t.TempDir())
	opt.Retries = 0 // the default
	f := File{URL: fs.url("w"), Path: "w.bin", Size: int64(len(data)), SHA256: want}
	_, err := Fetch(context.Background(), []File{f}, opt)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), sha256Hex(data)) {
		t.Fatalf("Fetch = %v, want a mismatch naming %s and %s", err, want, sha256Hex(data))
	}
	if n := len(fs.requests()); n != 2 {
		t.Errorf("the file was fetched %d times for one wrong digest, want 2", n)
	}
}

// TestRetryAfterBeyondTheBudget: a 429 whose Retry-After is longer than what is left of
// the file's no-progress budget fails at once, saying how long the server asked and how
// much budget was left, instead of waiting silently until the budget ends; a wait within
// the budget is logged with what, why, how long and the budget left.
func TestRetryAfterBeyondTheBudget(t *testing.T) {
	data := randomBytes(t, 4096)
	fs := newFaultServer(t, map[string][]byte{"w": data})
	var asked atomic.Int64
	fs.configure(func() {
		fs.plan = func(n int, r *http.Request) action {
			if asked.Add(1) == 1 {
				return action{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"1"}}}
			}
			return action{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"3600"}}}
		}
	})
	var mu sync.Mutex
	var logged []string
	opt := permanentOptions(t.TempDir())
	opt.Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	start := time.Now()
	f := File{URL: fs.url("w"), Path: "w.bin", Size: int64(len(data)), SHA256: sha256Hex(data)}
	_, err := Fetch(context.Background(), []File{f}, opt)
	if err == nil || !strings.Contains(err.Error(), "asks to wait 1h0m0s, more than the") || !strings.Contains(err.Error(), "429") {
		t.Fatalf("Fetch = %v, want an error saying the wait of 1h exceeds the budget", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("failed after %s", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || !strings.Contains(logged[0], "w.bin") || !strings.Contains(logged[0], "asks to wait 1s") ||
		!strings.Contains(logged[0], "429") || !strings.Contains(logged[0], "left of the no-progress budget") {
		t.Errorf("the wait within the budget was logged as %q, want what, why, how long and the budget left", logged)
	}
}
