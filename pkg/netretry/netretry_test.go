package netretry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestGrowingWaitsWithinBudget: the waits double up to the cap, each logged with what it
// waits for and the budget left, and the last error says how many tries over how long.
func TestGrowingWaitsWithinBudget(t *testing.T) {
	var waits []string
	var lefts []string
	p := Policy{Budget: 700 * time.Millisecond, First: 50 * time.Millisecond, Max: 200 * time.Millisecond,
		Log: func(_ slog.Level, msg string, kv ...any) {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
			if msg != "waiting for the network" || m["waiting_for"] != "the host name h.invalid to resolve (DNS)" {
				t.Errorf("logged %q %v", msg, m)
			}
			waits = append(waits, m["retry_in"].(string))
			lefts = append(lefts, m["budget_left"].(string))
		}}
	tries := 0
	err := p.Do(context.Background(), "x", func() (Verdict, error) {
		tries++
		err := &net.DNSError{Err: "no such host", Name: "h.invalid", IsNotFound: true}
		return Classify(err), err
	})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("gave up after %d tries", tries)) {
		t.Fatalf("err = %v after %d tries", err, tries)
	}
	if len(waits) < 4 || waits[0] != "50ms" || waits[1] != "100ms" || waits[2] != "200ms" || waits[3] != "200ms" {
		t.Errorf("waits %v, want 50ms 100ms 200ms 200ms ...", waits)
	}
	if len(waits) > 6 {
		t.Errorf("%d waits in a 700ms budget with waits of up to 200ms", len(waits))
	}
	if lefts[0] == lefts[len(lefts)-1] {
		t.Errorf("the budget left did not count down: %v", lefts)
	}
}

// TestNoRetryWhereItCannotHelp: an error that a retry cannot help ends at the first try.
func TestNoRetryWhereItCannotHelp(t *testing.T) {
	tries := 0
	err := Policy{Budget: time.Minute}.Do(context.Background(), "x", func() (Verdict, error) {
		tries++
		err := errors.New("fatal: repository 'https://h/x.git/' not found")
		return ClassifyGit(err), err
	})
	if err == nil || tries != 1 || strings.Contains(err.Error(), "gave up") {
		t.Fatalf("err %v after %d tries", err, tries)
	}
}

// TestRetryAfterBeyondBudget: a server that asks for a wait longer than the budget left
// fails at once, saying so.
func TestRetryAfterBeyondBudget(t *testing.T) {
	err := Policy{Budget: time.Second}.Do(context.Background(), "x", func() (Verdict, error) {
		return Verdict{Retry: true, After: time.Minute}, errors.New("429")
	})
	if err == nil || !strings.Contains(err.Error(), "more than the retry budget allows") {
		t.Fatalf("err = %v", err)
	}
}

// TestClassifyGit: git's messages of failures a retry can help, and what each waits for.
func TestClassifyGit(t *testing.T) {
	for msg, want := range map[string]string{
		"fatal: unable to access 'https://x/': Could not resolve host: github.com":         "the host name github.com to resolve (DNS)",
		"ssh: Could not resolve hostname github.com: Temporary failure in name resolution": "the host name github.com to resolve (DNS)",
		"fatal: unable to access 'https://x/': Failed to connect to github.com port 443":   "github.com to accept connections",
		"fatal: unable to access 'https://x/': The requested URL returned error: 503":      "the server to answer without an error (503)",
		"error: RPC failed; curl 56 GnuTLS recv error (-9)":                                "the transfer to complete",
		"fatal: repository 'https://github.com/x/y/' not found":                            "",
		"fatal: unable to access 'https://x/': The requested URL returned error: 403":      "",
		"fatal: reference is not a tree: 0123456789abcdef0123456789abcdef01234567":         "",
	} {
		v := ClassifyGit(errors.New(msg))
		if v.WaitingFor != want || v.Retry != (want != "") {
			t.Errorf("ClassifyGit(%q) = %+v, want waiting for %q", msg, v, want)
		}
	}
}
