// API requests: one JSON answer read within its bounds, and retries with waits within the
// client's budget.

package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sglprov/sglprov/pkg/httpwait"
	"github.com/sglprov/sglprov/pkg/redact"
)

// maxAPIWait bounds the wait before one retry of an API request that a Retry-After or
// RateLimit header asks for (the hub's windows are 5 minutes).
const maxAPIWait = 5 * time.Minute

// getJSON decodes the JSON answer to a GET of u into v, retrying transport errors, 5xx and
// 429 answers, each after at least the wait a Retry-After or RateLimit header asks for;
// hdr, when set, receives the answer's header.
func (c *Client) getJSON(ctx context.Context, u, repo, rev string, v any, hdr *http.Header) error {
	return c.retry(ctx, "hub API request "+redact.URL(u), func() (bool, error) { return c.getJSONOnce(ctx, u, repo, rev, v, hdr) })
}

// retry calls once until it succeeds, fails in a way not worth retrying, or the client's
// retries (Retries, then RetryFor) are spent; the waits double up to 10s and are at least
// what an APIError's Retry-After or RateLimit asked for. Each wait is logged (what, why,
// how long, the budget left); a wait asked for beyond the budget fails at once, saying so.
// The first failure to resolve the endpoint's host name is logged as an error.
func (c *Client) retry(ctx context.Context, what string, once func() (retry bool, err error)) error {
	wait := c.retryWait
	start := time.Now()
	for attempt := 0; ; attempt++ {
		retry, err := once()
		if err == nil || !retry || ctx.Err() != nil {
			return err
		}
		c.noteDNS(err)
		if attempt >= c.retries && time.Since(start) >= c.retryFor {
			return err
		}
		// The budget: what is left of RetryFor, or of the retries when that is longer.
		left := c.retryFor - time.Since(start)
		d := wait
		var api *APIError
		if errors.As(err, &api) && api.after > d {
			if api.after > maxAPIWait || (c.retryFor > 0 && api.after > left) {
				return fmt.Errorf("%w; its Retry-After or RateLimit asks to wait %s, more than the retry budget allows (%s left, at most %s per wait): giving up now",
					err, api.after.Round(time.Second), max(left, 0).Round(time.Second), maxAPIWait)
			}
			d = api.after
		}
		budget := fmt.Sprintf("%d retries", c.retries-attempt)
		if left > 0 {
			budget = left.Round(time.Second).String()
		}
		c.log(slog.LevelInfo, "hub request failed; waiting before retrying", "what", what, "why", err.Error(), "wait", d.Round(time.Millisecond).String(), "budget_left", budget)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// maxRetryWait caps the doubling wait between retries of an API request.
const maxRetryWait = 10 * time.Second

// noteDNS logs, once per client, a failure to resolve the endpoint's host name: a
// mistyped hf.endpoint or HF_ENDPOINT, or a host without DNS, is said at once, not after
// the retry budget; the requests are still retried (a DNS blip passes).
func (c *Client) noteDNS(err error) {
	var dns *net.DNSError
	if !errors.As(err, &dns) || !c.dnsSaid.CompareAndSwap(false, true) {
		return
	}
	c.log(slog.LevelError, "the hub's host name does not resolve", "host", dns.Name, "endpoint", c.shownEndpoint(), "from", c.source,
		"fix", "check the name in hf.endpoint or HF_ENDPOINT (unset for https://huggingface.co) and this host's DNS (/etc/resolv.conf, a proxy in /etc/sglprov/env)", "err", dns.Error())
}

func (c *Client) getJSONOnce(ctx context.Context, u, repo, rev string, v any, hdr *http.Header) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sglprov")
	resp, err := c.http.Do(req)
	if err != nil {
		return !httpwait.IsRedirectError(err), c.scrub(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		retry := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
		return retry, c.apiError(resp, repo, rev)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxListingBytes))
	if err := dec.Decode(v); err != nil {
		return true, fmt.Errorf("decoding the hub's answer from %s: %w", c.redact(u), err)
	}
	if hdr != nil {
		*hdr = resp.Header
	}
	return false, nil
}
