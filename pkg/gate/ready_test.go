package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineLog collects lines safely.
type lineLog struct {
	mu sync.Mutex
	l  []string
	st []WaitStatus
}

func (l *lineLog) add(s string, st WaitStatus) {
	l.mu.Lock()
	l.l, l.st = append(l.l, s), append(l.st, st)
	l.mu.Unlock()
}
func (l *lineLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

// refusingURL returns the URL of a port nothing listens on.
func refusingURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// TestWaitReportsRefusedAsItGoes waits on a port that refuses: the reporter says so at
// once, and then again at every interval while the wait goes on (a pipe's lines).
func TestWaitReportsRefusedAsItGoes(t *testing.T) {
	var lines lineLog
	url := refusingURL(t)
	rep := NewWaitReporter(url, nil, lines.add, 100*time.Millisecond)
	_, err := WaitReady(context.Background(), Config{URL: url, ReadyTimeout: 450 * time.Millisecond,
		PollInitial: 20 * time.Millisecond, PollMax: 300 * time.Millisecond, Waiting: rep.Update})
	rep.Stop()
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("wait: %v, want a refusal named", err)
	}
	got := lines.get()
	if len(got) < 3 {
		t.Fatalf("%d lines in a 450ms wait reported every 100ms: %q", len(got), got)
	}
	for _, l := range got {
		if !strings.Contains(l, "waiting for "+url+": not ready after") || !strings.Contains(l, "(last: /health_generate: connection refused)") {
			t.Errorf("line %q does not say what the wait saw", l)
		}
	}
	// The same as fields, for a logger: the elapsed time as of each report, the limit, what
	// was last seen.
	lines.mu.Lock()
	st := lines.st
	lines.mu.Unlock()
	if last := st[len(st)-1]; last.Elapsed < 200*time.Millisecond || last.Timeout != 450*time.Millisecond || last.Last != "/health_generate: connection refused" {
		t.Errorf("the last report's status: %+v", last)
	}
}

// TestWaitReportsLoading: a server that answers 503 with a body while it loads is
// reported with both.
func TestWaitReportsLoading(t *testing.T) {
	ready := time.Now().Add(300 * time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Now().Before(ready) {
			http.Error(w, "loading model weights", http.StatusServiceUnavailable)
			return
		}
	}))
	defer srv.Close()
	var statuses []WaitStatus
	_, err := WaitReady(context.Background(), Config{URL: srv.URL, ReadyTimeout: 5 * time.Second,
		PollInitial: 20 * time.Millisecond, PollMax: 50 * time.Millisecond,
		Waiting: func(s WaitStatus) { statuses = append(statuses, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(statuses) == 0 {
		t.Fatal("no status while the server loaded")
	}
	s := statuses[len(statuses)-1]
	if s.Last != `/health_generate: HTTP 503: "loading model weights"` || s.Polls != len(statuses) || s.Timeout != 5*time.Second {
		t.Errorf("last status %+v", s)
	}
}

// TestWaitReporterLiveLine: on a terminal the status line is rewritten in place and
// cleared at the end.
func TestWaitReporterLiveLine(t *testing.T) {
	var term bytes.Buffer
	rep := NewWaitReporter("http://x", &term, nil, 0)
	rep.Update(WaitStatus{Timeout: time.Minute, Last: "/health: HTTP 503"})
	rep.Stop()
	out := term.String()
	if !regexp.MustCompile(`^\r\x1b\[Kwaiting for http://x: not ready after [0-9.]+(µs|ms|s) of 1m0s \(last: /health: HTTP 503\)`).MatchString(out) || !strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("terminal output %q", out)
	}
}

// TestSampleJSONQuotedOnce: a verdict's sample is plain text in JSON (quoted once, by
// JSON), with sample_truncated when the answer was cut.
func TestSampleJSONQuotedOnce(t *testing.T) {
	b, err := json.Marshal(CaseResult{Name: "x", Sample: Sample(`say "hi"`+strings.Repeat("!", 100), 10)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"sample":"say \"hi\"!!","sample_truncated":true`)) {
		t.Errorf("JSON %s", b)
	}
}

// TestWaitStatusElapsed: the status says the time the wait really took, not "0s" for one
// that began a moment ago: milliseconds under a second, tenths under ten seconds.
func TestWaitStatusElapsed(t *testing.T) {
	for _, c := range []struct {
		elapsed time.Duration
		want    string
	}{
		{212345 * time.Microsecond, "not ready after 212ms of 3s"},
		{1340 * time.Millisecond, "not ready after 1.3s of 3s"},
		{92600 * time.Millisecond, "not ready after 1m33s of 3s"},
	} {
		got := WaitStatus{Elapsed: c.elapsed, Timeout: 3 * time.Second, Last: "x"}.String()
		if !strings.HasPrefix(got, c.want+" (last: x)") {
			t.Errorf("%v: %q, want %q", c.elapsed, got, c.want)
		}
	}
}
