package hub_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/test/fakehub"
)

// logLines collects what a client logs, one "LEVEL msg k=v ..." line per call.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) log(level slog.Level, msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprint(append([]any{level.String(), " ", msg, " "}, kv...)...))
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestEndlessPaginationIsBounded: a mirror whose tree listing names a new next page for
// ever is read for at most hub.MaxTreePages pages, then the listing fails naming the
// endpoint, with the budget of a download still far from spent.
func TestEndlessPaginationIsBounded(t *testing.T) {
	h := startHub(t, fakehub.Options{EndlessPages: true, PageSize: 3})
	c, err := hub.New(hub.Options{Endpoint: h.URL(), Getenv: noEnv, RetryFor: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.ListTree(context.Background(), repo, h.Commit())
	if err == nil || !strings.Contains(err.Error(), "pagination does not end") || !strings.Contains(err.Error(), h.URL()) {
		t.Fatalf("ListTree = %v, want an error naming the endpoint whose pagination does not end", err)
	}
	if n := h.TreePages(); n > hub.MaxTreePages {
		t.Errorf("%d pages were asked for, want at most %d", n, hub.MaxTreePages)
	}
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("took %s", took)
	}
}

// TestPermanentRedirectsAreNotRetried: a hub (or mirror) that redirects its API to
// file:// or to itself fails the request at once, naming the hop, rather than retrying
// it for the whole budget.
func TestPermanentRedirectsAreNotRetried(t *testing.T) {
	for _, mode := range []string{"file", "loop"} {
		t.Run(mode, func(t *testing.T) {
			h := startHub(t, fakehub.Options{Redirect: mode})
			var logs logLines
			c, err := hub.New(hub.Options{Endpoint: h.URL(), Getenv: noEnv, RetryFor: 10 * time.Minute, RetryWait: 10 * time.Millisecond, Log: logs.log})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = c.ResolveRevision(context.Background(), repo, "main")
			if err == nil || !strings.Contains(err.Error(), "not retried") {
				t.Fatalf("ResolveRevision = %v, want a redirect error that is not retried", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("failed after %s", took)
			}
			if l := logs.all(); len(l) > 0 {
				t.Errorf("a permanent redirect was retried: %q", l)
			}
		})
	}
}

// TestAPIWaitsAreLogged: every wait before a retry of an API request is logged at info
// with what was asked, why it failed, how long the wait is and the budget left; a
// Retry-After beyond the budget fails at once, saying so.
func TestAPIWaitsAreLogged(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Retry-After", "3600")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer srv.Close()
	var logs logLines
	c, err := hub.New(hub.Options{Endpoint: srv.URL, Getenv: noEnv, RetryFor: 10 * time.Minute, RetryWait: 10 * time.Millisecond, Log: logs.log})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.ResolveRevision(context.Background(), repo, "main")
	if err == nil || !strings.Contains(err.Error(), "asks to wait 1h0m0s") || !strings.Contains(err.Error(), "giving up now") {
		t.Fatalf("ResolveRevision = %v, want an error saying the wait exceeds the budget", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failed after %s", took)
	}
	l := logs.all()
	if len(l) != 1 || !strings.HasPrefix(l[0], "INFO") {
		t.Fatalf("logged %q, want one info line for the one wait", l)
	}
	for _, want := range []string{"/api/models/org/model/revision/main", "503", "wait", "budget_left"} {
		if !strings.Contains(l[0], want) {
			t.Errorf("the wait's line %q lacks %q", l[0], want)
		}
	}
}

// TestUnresolvableHostSaidAtOnce: an endpoint whose host name does not resolve is logged
// as an error at the first failure, naming the host and HF_ENDPOINT, and still retried
// (in the open: each wait logged) until the budget ends.
func TestUnresolvableHostSaidAtOnce(t *testing.T) {
	env := func(k string) string {
		if k == "HF_ENDPOINT" {
			return "http://no-such-hub.invalid"
		}
		return ""
	}
	var logs logLines
	c, err := hub.New(hub.Options{Getenv: env, Retries: 2, RetryWait: 10 * time.Millisecond, Log: logs.log})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ResolveRevision(context.Background(), repo, "main")
	if err == nil {
		t.Fatal("ResolveRevision of an unresolvable host succeeded")
	}
	l := logs.all()
	if len(l) != 3 {
		t.Fatalf("logged %q, want the DNS error once and one line per wait (2)", l)
	}
	if !strings.HasPrefix(l[0], "ERROR") || !strings.Contains(l[0], "no-such-hub.invalid") || !strings.Contains(l[0], "HF_ENDPOINT") {
		t.Errorf("first line %q, want an error naming the host and HF_ENDPOINT", l[0])
	}
	for _, line := range l[1:] {
		if !strings.HasPrefix(line, "INFO") || !strings.Contains(line, "wait") {
			t.Errorf("line %q, want an info line for a wait", line)
		}
	}
}
