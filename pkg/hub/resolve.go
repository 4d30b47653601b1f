// Resolve: a revision to its commit, a file to its resolve URL, and a HEAD of that URL for
// the size and digest the hub (or the CDN it redirects to) states.

package hub

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/httpwait"
	"github.com/sglprov/sglprov/pkg/redact"
)

// ResolveURL returns the URL a file of repo at commit is downloaded from.
func (c *Client) ResolveURL(repo, commit, name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.Endpoint() + "/" + repo + "/resolve/" + url.PathEscape(commit) + "/" + strings.Join(segs, "/")
}

// commitRE matches a full git commit id.
var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommit reports whether rev is a full 40-hex commit id.
func IsCommit(rev string) bool { return commitRE.MatchString(rev) }

// ResolveRevision returns the commit that rev (a branch, tag or commit; "" means main)
// names in repo.
func (c *Client) ResolveRevision(ctx context.Context, repo, rev string) (string, error) {
	if err := CheckRepo(repo); err != nil {
		return "", err
	}
	if rev == "" {
		rev = "main"
	}
	u := c.Endpoint() + "/api/models/" + repo + "/revision/" + url.PathEscape(rev)
	var info struct {
		SHA string `json:"sha"`
	}
	if err := c.getJSON(ctx, u, repo, rev, &info, nil); err != nil {
		return "", fmt.Errorf("resolving revision %q of %s: %w", rev, repo, err)
	}
	if !IsCommit(info.SHA) {
		return "", fmt.Errorf("resolving revision %q of %s: the hub answered commit %q, want 40 hex digits", rev, repo, info.SHA)
	}
	return info.SHA, nil
}

// headFile fills f's size and digest from a HEAD of its resolve URL; retry says whether
// its failure is worth retrying (transport, 5xx, 429).
func (c *Client) headFile(ctx context.Context, repo, commit string, f *File) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, f.URL, nil)
	if err != nil {
		return false, fmt.Errorf("%s: %w", f.Path, err)
	}
	req.Header.Set("User-Agent", "sglprov")
	req.Header.Set("Accept-Encoding", "identity")
	hc := *c.http
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		return !httpwait.IsRedirectError(err), fmt.Errorf("%s: %w", f.Path, c.scrub(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		retry := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
		return retry, fmt.Errorf("%s: %w", f.Path, c.apiError(resp, repo, commit))
	}
	if etag := unquoteETag(resp.Header.Get("X-Linked-Etag")); etag != "" {
		size, err := strconv.ParseInt(resp.Header.Get("X-Linked-Size"), 10, 64)
		if !hexOf(etag, 64) || err != nil || size < 0 {
			return false, fmt.Errorf("%s: X-Linked-Etag %q and X-Linked-Size %q, want a sha256 and a size", f.Path, etag, resp.Header.Get("X-Linked-Size"))
		}
		f.SHA256, f.Size = etag, size
		return false, nil
	}
	etag := unquoteETag(resp.Header.Get("ETag"))
	size, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if !hexOf(etag, 40) || err != nil || size < 0 || resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: answered %s with ETag %q and Content-Length %q, want a git sha1 and a size (or X-Linked-Etag and X-Linked-Size)", f.Path, resp.Status, etag, resp.Header.Get("Content-Length"))
	}
	f.GitSHA1, f.Size = etag, size
	return false, nil
}

// unquoteETag returns an entity tag without W/ and quotes, in lower case.
func unquoteETag(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
	return strings.ToLower(strings.Trim(v, `"`))
}

func hexOf(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// ProbeTimeout bounds Probe.
const ProbeTimeout = 30 * time.Second

// Probe asks for one file's resolve URL with HEAD, without following its redirect to the
// CDN, as a download would begin: the hub refuses resolve for a gated or private
// repository whose API it answers to anyone, so this is where a missing licence or token
// shows. It returns nil when the hub would serve the file, an *APIError with its hint when
// it refuses, and another error when it cannot be asked.
func (c *Client) Probe(ctx context.Context, repo, rev, resolveURL string) error {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, resolveURL, nil)
	if err != nil {
		return fmt.Errorf("probing %s: %w", redact.URL(resolveURL), err)
	}
	req.Header.Set("User-Agent", "sglprov")
	hc := *c.http
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("probing %s: %w", redact.URL(resolveURL), c.scrub(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 400 {
		return nil
	}
	return fmt.Errorf("probing %s: %w", redact.URL(resolveURL), c.apiError(resp, repo, rev))
}
