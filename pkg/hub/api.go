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

	"github.com/sglprov/sglprov/pkg/httpwait"
	"github.com/sglprov/sglprov/pkg/netretry"
	"github.com/sglprov/sglprov/pkg/redact"
)

// getJSON decodes the JSON answer to a GET of u into v, retrying transport errors, 5xx and
// 429 answers, each after at least the wait a Retry-After or RateLimit header asks for;
// hdr, when set, receives the answer's header.
func (c *Client) getJSON(ctx context.Context, u, repo, rev string, v any, hdr *http.Header) error {
	return c.retry(ctx, "hub API request "+redact.URL(u), func() (bool, error) { return c.getJSONOnce(ctx, u, repo, rev, v, hdr) })
}

// retry calls once until it succeeds, fails in a way not worth retrying, or the client's
// retries (Retries, then RetryFor) are spent, under the one retry policy of the steps that
// reach the network (pkg/netretry): growing waits, each at least what an APIError's
// Retry-After or RateLimit asked for, each logged with what it waits for and the budget
// left; a wait asked for beyond the budget fails at once, saying so. The first failure to
// resolve the endpoint's host name is logged as an error.
func (c *Client) retry(ctx context.Context, what string, once func() (retry bool, err error)) error {
	budget := c.retryFor
	if budget <= 0 {
		budget = -1
	}
	p := netretry.Policy{Budget: budget, Retries: c.retries, First: c.retryWait, Log: c.log}
	return p.Do(ctx, what, func() (netretry.Verdict, error) {
		retry, err := once()
		if err == nil || !retry {
			return netretry.Verdict{}, err
		}
		c.noteDNS(err)
		v := netretry.Classify(err)
		v.Retry = true
		var api *APIError
		if errors.As(err, &api) {
			v.After = api.after
			if v.WaitingFor == "" {
				v.WaitingFor = fmt.Sprintf("the hub to answer without an error (HTTP %d)", api.Status)
			}
		}
		return v, err
	})
}

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
