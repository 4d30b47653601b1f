// Package netretry is the one retry policy of every step that reaches the network (the
// hub's API, git): a failure that a retry can help (a host name that does not resolve yet
// at early boot, a refused or dropped connection, a server error, a rate limit) is tried
// again with a growing wait, within one time budget, and every wait is logged with what
// it waits for and the budget left; any other failure ends at once.
package netretry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// DefaultBudget is how long a failing network request is retried when the recipe's
// network.retry_for does not say: long enough for DNS and the network to come up at
// early boot, short enough that a host that stays unreachable fails the run.
const DefaultBudget = 10 * time.Minute

// Waits of the policy: the first wait, doubled after each try up to MaxWait, so that ten
// minutes take about a dozen tries (and log lines), not sixty.
const (
	FirstWait = time.Second
	MaxWait   = 2 * time.Minute
)

// MaxAfter bounds the wait a server may ask for (Retry-After, RateLimit): a longer one
// fails at once rather than sleeping.
const MaxAfter = 5 * time.Minute

// Verdict is what one failed try says about the next.
type Verdict struct {
	// Retry says whether trying again can help.
	Retry bool
	// After is the least wait the server asked for (Retry-After), or 0.
	After time.Duration
	// WaitingFor says what a retry waits for, e.g. "the host name example.org to resolve
	// (DNS)"; "" means Classify's answer for the error.
	WaitingFor string
}

// Policy is the retry policy of one request.
type Policy struct {
	// Budget is how long after the first try retries go on (0: DefaultBudget); negative:
	// no budget, only Retries.
	Budget time.Duration
	// Retries is how many retries are made at least, whatever the budget (0: none); a
	// negative Budget with Retries 0 means no retry at all.
	Retries int
	// First is the first wait (0: FirstWait); Max caps the doubling waits (0: MaxWait).
	First, Max time.Duration
	// Log receives one line per wait (slog.LevelInfo): what, what it waits for, why, the
	// wait and the budget left; nil discards them.
	Log func(level slog.Level, msg string, keyvals ...any)
}

// Do calls once until it succeeds, fails in a way a retry cannot help, the context ends
// or the budget is spent; the error returned last says how many tries were made over how
// long when retries were made.
func (p Policy) Do(ctx context.Context, what string, once func() (Verdict, error)) error {
	budget := p.Budget
	if budget == 0 {
		budget = DefaultBudget
	}
	if budget < 0 {
		budget = 0
	}
	wait, maxWait := p.First, p.Max
	if wait <= 0 {
		wait = FirstWait
	}
	if maxWait <= 0 {
		maxWait = MaxWait
	}
	log := p.Log
	if log == nil {
		log = func(slog.Level, string, ...any) {}
	}
	start := time.Now()
	for try := 1; ; try++ {
		v, err := once()
		if err == nil || !v.Retry || ctx.Err() != nil {
			return err
		}
		left := budget - time.Since(start)
		if try > p.Retries && left <= 0 {
			if try == 1 {
				return err
			}
			return fmt.Errorf("%w (gave up after %d tries over %s: the retry budget, network.retry_for, is %s)",
				err, try, time.Since(start).Round(time.Second), budget)
		}
		d := min(wait, maxWait)
		if left > 0 && d > left {
			d = left
		}
		if v.After > d {
			if v.After > MaxAfter || (budget > 0 && v.After > left) {
				return fmt.Errorf("%w; its Retry-After or RateLimit asks to wait %s, more than the retry budget allows (%s left, at most %s per wait): giving up now",
					err, v.After.Round(time.Second), max(left, 0).Round(time.Second), MaxAfter)
			}
			d = v.After
		}
		waitingFor := v.WaitingFor
		if waitingFor == "" {
			waitingFor = Classify(err).WaitingFor
		}
		shownLeft := fmt.Sprintf("%d retries", p.Retries-try+1)
		if left > 0 {
			shownLeft = left.Round(time.Second).String()
		}
		log(slog.LevelInfo, "waiting for the network", "what", what, "waiting_for", waitingFor, "try", try,
			"retry_in", shown(d), "budget_left", shownLeft, "why", err.Error())
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// Classify says whether a retry can help a Go network error, and what it waits for: a
// host name that does not resolve (DNS may not be up yet), a connection refused, reset
// or timed out. Other errors (a bad URL, a TLS certificate, a cancelled context) are
// not retried.
func Classify(err error) Verdict {
	var dns *net.DNSError
	switch {
	case err == nil:
		return Verdict{}
	case errors.Is(err, context.Canceled):
		return Verdict{}
	case errors.As(err, &dns):
		return Verdict{Retry: true, WaitingFor: fmt.Sprintf("the host name %s to resolve (DNS)", dns.Name)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return Verdict{Retry: true, WaitingFor: "the server to accept connections" + opAddr(err)}
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return Verdict{Retry: true, WaitingFor: "a route to the server" + opAddr(err)}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Verdict{Retry: true, WaitingFor: "the connection to hold" + opAddr(err)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Verdict{Retry: true, WaitingFor: "an answer from the server" + opAddr(err)}
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return Verdict{Retry: true, WaitingFor: "the network" + opAddr(err)}
	}
	return Verdict{}
}

// opAddr is " (ADDR)" for an error that names the address it failed on, else "".
func opAddr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		return " (" + op.Addr.String() + ")"
	}
	return ""
}

// gitTransient are git's messages of failures that a retry can help, with what the retry
// waits for ($1: the host or URL git named).
var gitTransient = []struct {
	re    *regexp.Regexp
	waits string
}{
	{regexp.MustCompile(`Could not resolve host: ([^\s']+)`), "the host name $1 to resolve (DNS)"},
	{regexp.MustCompile(`Could not resolve hostname ([^\s:]+)`), "the host name $1 to resolve (DNS)"},
	{regexp.MustCompile(`Temporary failure in name resolution`), "DNS to answer"},
	{regexp.MustCompile(`Failed to connect to ([^\s]+)`), "$1 to accept connections"},
	{regexp.MustCompile(`Connection refused`), "the server to accept connections"},
	{regexp.MustCompile(`Connection timed out|Operation timed out`), "an answer from the server"},
	{regexp.MustCompile(`Network is unreachable|No route to host`), "a route to the server"},
	{regexp.MustCompile(`returned error: (5\d\d)`), "the server to answer without an error ($1)"},
	{regexp.MustCompile(`returned error: 429`), "the server's rate limit"},
	{regexp.MustCompile(`Connection reset|RPC failed|early EOF|unexpected disconnect|the remote end hung up unexpectedly`), "the transfer to complete"},
}

// ClassifyGit says whether a retry can help a failed git command, from its standard
// error (which the error carries), and what it waits for.
func ClassifyGit(err error) Verdict {
	if err == nil || errors.Is(err, context.Canceled) {
		return Verdict{}
	}
	msg := err.Error()
	for _, t := range gitTransient {
		if m := t.re.FindStringSubmatchIndex(msg); m != nil {
			return Verdict{Retry: true, WaitingFor: strings.TrimSpace(string(t.re.ExpandString(nil, t.waits, msg, m)))}
		}
	}
	return Verdict{}
}

// shown is a wait as logged: whole seconds from a second on.
func shown(d time.Duration) string {
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
