// Package hub is a client for the Hugging Face hub's HTTP API: it resolves a revision to a
// commit, lists a repository's files at that commit with their sizes and digests, and builds
// the resolve URLs the files are downloaded from.
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
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sglprov/sglprov/pkg/httpwait"
	"github.com/sglprov/sglprov/pkg/redact"
	"github.com/sglprov/sglprov/pkg/safefile"
)

// DefaultEndpoint is the hub used when neither the recipe nor HF_ENDPOINT names one.
const DefaultEndpoint = "https://huggingface.co"

// maxListingBytes bounds one page of a tree listing.
const maxListingBytes = 64 << 20

// apiTimeout bounds one API request (a revision or one page of a listing), so that a hub
// that stops answering is retried rather than waited on for ever.
const apiTimeout = 2 * time.Minute

// Options configures a Client.
type Options struct {
	// Endpoint is the hub's base URL; "" means HF_ENDPOINT, then DefaultEndpoint.
	Endpoint string
	// Token is sent as a bearer token to the endpoint's host only; "" means the token is
	// read from HF_TOKEN or a token file (see ReadToken).
	Token string
	// TokenFile names a file holding the token; it takes precedence over HF_TOKEN.
	TokenFile string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// HTTPClient carries the requests; nil means a client with default settings.
	HTTPClient *http.Client
	// Retries is how many times an API request that failed in transport or with a 5xx or
	// 429 answer is tried again (0: 3; negative: none).
	Retries int
	// RetryWait is the wait before the first retry; it doubles each time, up to 10s (0: 1s).
	RetryWait time.Duration
	// RetryFor, when positive, keeps retrying such a request past Retries for as long as
	// this has not passed since its first attempt (a download's no-progress budget), so that
	// a minute of 5xx or a DNS blip does not end a run; Retries < 0 still means none.
	RetryFor time.Duration
	// Log receives one line per wait before a retry (slog.LevelInfo: what, why, how long,
	// the budget left) and, once per client, the first failure to resolve the endpoint's
	// host name (slog.LevelError, naming the host and where the endpoint came from); nil
	// means discarded.
	Log func(level slog.Level, msg string, keyvals ...any)
}

// Client talks to one hub endpoint. It is safe for concurrent use.
type Client struct {
	endpoint  *url.URL
	token     string
	http      *http.Client
	retries   int
	retryWait time.Duration
	retryFor  time.Duration
	// source says where the endpoint came from ("hf.endpoint", "HF_ENDPOINT", "the default").
	source string
	log    func(level slog.Level, msg string, keyvals ...any)
	// dnsSaid is set once the first name-resolution failure was logged.
	dnsSaid atomic.Bool
}

// New returns a client for the endpoint and token that opt names.
func New(opt Options) (*Client, error) {
	getenv := opt.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ep, source := opt.Endpoint, "hf.endpoint"
	if ep == "" {
		ep, source = getenv("HF_ENDPOINT"), "HF_ENDPOINT"
	}
	if ep == "" {
		ep, source = DefaultEndpoint, "the default (HF_ENDPOINT unset)"
	}
	u, err := url.Parse(strings.TrimRight(ep, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("parsing hub endpoint %q: want an http(s) URL", redact.URL(ep))
	}
	token := opt.Token
	if token == "" {
		token, err = ReadToken(getenv, opt.TokenFile)
		if err != nil {
			return nil, err
		}
	}
	base := opt.HTTPClient
	if base == nil {
		base = &http.Client{}
	}
	c := &Client{endpoint: u, token: token, retries: opt.Retries, retryWait: opt.RetryWait, retryFor: opt.RetryFor, source: source, log: opt.Log}
	if c.log == nil {
		c.log = func(slog.Level, string, ...any) {}
	}
	if opt.Retries < 0 {
		c.retryFor = 0
	}
	if c.retries == 0 {
		c.retries = 3
	}
	if c.retries < 0 {
		c.retries = 0
	}
	if c.retryWait <= 0 {
		c.retryWait = time.Second
	}
	hc := *base
	hc.Transport = &authTransport{base: base.Transport, scheme: u.Scheme, host: u.Host, token: token}
	// A redirect to file://, a loop or an endless chain is refused as permanent: no
	// retry can change it.
	orig := base.CheckRedirect
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := httpwait.CheckRedirect(req, via); err != nil {
			return err
		}
		if orig != nil {
			return orig(req, via)
		}
		return nil
	}
	c.http = &hc
	return c, nil
}

// ReadToken returns the hub token as huggingface_hub finds it: the contents of tokenFile
// when it is set (an error when it cannot be read), else HF_TOKEN, else the older
// HUGGING_FACE_HUB_TOKEN, else the file HF_TOKEN_PATH names, else Home()/token; "" when
// there is none. Surrounding whitespace is trimmed. A token file that is not a regular file
// (a FIFO) or holds more than 64 KiB is an error that names it, never waited on.
func ReadToken(getenv func(string) string, tokenFile string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if tokenFile != "" {
		b, err := safefile.ReadRegular(tokenFile, maxTokenFile)
		if err != nil {
			return "", fmt.Errorf("reading hub token file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(getenv(k)); t != "" {
			return t, nil
		}
	}
	var candidates []string
	if p := getenv("HF_TOKEN_PATH"); p != "" {
		candidates = append(candidates, p)
	}
	if h := Home(getenv); h != "" {
		candidates = append(candidates, filepath.Join(h, "token"))
	}
	for _, p := range candidates {
		b, err := safefile.ReadRegular(p, maxTokenFile)
		if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrTooLarge) {
			return "", fmt.Errorf("reading hub token file: %w", err)
		}
		if err == nil {
			return strings.TrimSpace(string(b)), nil
		}
	}
	return "", nil
}

// Home returns huggingface_hub's home folder: HF_HOME, else $XDG_CACHE_HOME/huggingface,
// else ~/.cache/huggingface; "" when none of them is set (no HOME either).
func Home(getenv func(string) string) string {
	if h := getenv("HF_HOME"); h != "" {
		return h
	}
	if x := getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".cache", "huggingface")
	}
	return ""
}

// CacheDir returns huggingface_hub's cache of repositories (the folder that holds
// models--ORG--NAME): HF_HUB_CACHE, else the older HUGGINGFACE_HUB_CACHE, else
// Home()/hub; "" when there is no home.
func CacheDir(getenv func(string) string) string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := getenv(k); d != "" {
			return d
		}
	}
	if h := Home(getenv); h != "" {
		return filepath.Join(h, "hub")
	}
	return ""
}

// Offline reports whether HF_HUB_OFFLINE (or the older TRANSFORMERS_OFFLINE) asks that
// the hub not be contacted: 1, ON, YES or TRUE in any case, as huggingface_hub reads it.
func Offline(getenv func(string) string) bool {
	v := getenv("HF_HUB_OFFLINE")
	if v == "" {
		v = getenv("TRANSFORMERS_OFFLINE")
	}
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// maxTokenFile is the largest hub token file read; a token is a few dozen bytes.
const maxTokenFile = 64 << 10

// Endpoint returns the hub's base URL, without a trailing slash.
func (c *Client) Endpoint() string { return c.endpoint.String() }

// TokenHost returns the host (with port, if any) the token is sent to.
func (c *Client) TokenHost() string { return c.endpoint.Host }

// HasToken reports whether the client has a token to send.
func (c *Client) HasToken() bool { return c.token != "" }

// Token returns the token, for handing to a downloader that sends it to TokenHost only.
func (c *Client) Token() string { return c.token }

// HTTPClient returns the client's HTTP client: it adds the token to requests for the
// endpoint's host only, including requests made after a redirect.
func (c *Client) HTTPClient() *http.Client { return c.http }

// authTransport adds the bearer token to requests whose host is exactly the hub's.
type authTransport struct {
	base   http.RoundTripper
	scheme string
	host   string
	token  string
}

// RoundTrip implements http.RoundTripper.
func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	// Only to the endpoint itself: same host and port, and never downgraded to another
	// scheme (https to http) by a redirect.
	if req.URL.Host == t.host && req.URL.Scheme == t.scheme && t.token != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.token)
	} else if req.Header.Get("Authorization") != "" {
		req = req.Clone(req.Context())
		req.Header.Del("Authorization")
	}
	return base.RoundTrip(req)
}

var repoRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$`)

// CheckRepo reports whether repo is a valid "namespace/name" (or "name") repository id.
func CheckRepo(repo string) error {
	if !repoRE.MatchString(repo) || strings.Contains(repo, "..") {
		return fmt.Errorf("invalid hub repository %q: want namespace/name", repo)
	}
	return nil
}

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

// LFS is the large-file metadata of a tree entry.
type LFS struct {
	// OID is the file's sha256, hex.
	OID string `json:"oid"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// PointerSize is the size of the git pointer file.
	PointerSize int64 `json:"pointerSize"`
}

// Entry is one item of a tree listing.
type Entry struct {
	// Type is "file" or "directory".
	Type string `json:"type"`
	// Path is the item's path in the repository.
	Path string `json:"path"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// OID is the git object id (for a file, its blob sha1; for an LFS file, the pointer's).
	OID string `json:"oid"`
	// LFS is set for files stored in LFS.
	LFS *LFS `json:"lfs,omitempty"`
}

// MaxTreeEntries is the most entries a tree listing may have (the hub advises at most
// 100,000 files per repository); MaxTreePages the most pages read for one: a next-page
// link past either, or one already followed, fails the listing, naming the endpoint.
const (
	MaxTreeEntries = 200_000
	MaxTreePages   = 1_000
)

// ListTree lists every entry of repo at commit, following the listing's pagination
// (bounded by MaxTreePages and MaxTreeEntries).
func (c *Client) ListTree(ctx context.Context, repo, commit string) ([]Entry, error) {
	if err := CheckRepo(repo); err != nil {
		return nil, err
	}
	next := c.Endpoint() + "/api/models/" + repo + "/tree/" + url.PathEscape(commit) + "?recursive=true"
	var all []Entry
	seen := map[string]bool{}
	for pages := 0; next != ""; pages++ {
		if seen[next] {
			return nil, fmt.Errorf("listing files of %s at %s: the endpoint %s names a next page it already gave (%s): its pagination loops; fix or replace the mirror (hf.endpoint, HF_ENDPOINT)", repo, commit, c.shownEndpoint(), redact.URL(next))
		}
		if pages >= MaxTreePages || len(all) > MaxTreeEntries {
			return nil, fmt.Errorf("listing files of %s at %s: the endpoint %s still names a next page after %d pages and %d entries (at most %d pages or %d files are read): its pagination does not end; fix or replace the mirror (hf.endpoint, HF_ENDPOINT)",
				repo, commit, c.shownEndpoint(), pages, len(all), MaxTreePages, MaxTreeEntries)
		}
		seen[next] = true
		var page []Entry
		var hdr http.Header
		if err := c.getJSON(ctx, next, repo, commit, &page, &hdr); err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		all = append(all, page...)
		n, err := nextLink(hdr, next)
		if err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		if n != "" {
			if n, err = c.onEndpoint(n, "/api/models/"+repo+"/tree/"); err != nil {
				return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
			}
		}
		next = n
	}
	return all, nil
}

// onEndpoint returns a next-page link as it is followed: on the endpoint's own scheme and
// host as it stands; a link that names another host (a mirror that passes on its
// upstream's links) is taken onto the endpoint, its path under the endpoint's path, never
// followed elsewhere (nor is the token sent there). The path must lie under wantPath.
func (c *Client) onEndpoint(link, wantPath string) (string, error) {
	u, err := url.Parse(link)
	if err != nil {
		return "", fmt.Errorf("parsing next-page link: %w", err)
	}
	ep := c.endpoint
	if u.Scheme == ep.Scheme && u.Host == ep.Host {
		if !strings.HasPrefix(u.Path, ep.Path+wantPath) {
			return "", fmt.Errorf("next-page link %s leaves the listing", redact.URL(link))
		}
		return link, nil
	}
	p := u.Path
	if ep.Path != "" && strings.HasPrefix(p, ep.Path+"/") {
		p = strings.TrimPrefix(p, ep.Path)
	}
	if !strings.HasPrefix(p, wantPath) {
		return "", fmt.Errorf("next-page link %s names another host and leaves the listing", redact.URL(link))
	}
	onto := *ep
	onto.Path = ep.Path + p
	onto.RawPath = ""
	onto.RawQuery = u.RawQuery
	return onto.String(), nil
}

// File is a file to download from the hub.
type File struct {
	// Path is the file's path in the repository and under the destination.
	Path string
	// URL is its resolve URL at the commit.
	URL string
	// Size is its size in bytes.
	Size int64
	// SHA256 is its sha256 (hex) for LFS files, "" otherwise.
	SHA256 string
	// GitSHA1 is its git blob sha1 (hex) for files not in LFS, "" otherwise.
	GitSHA1 string
}

// Files lists the files of repo at commit that match include (all when empty) and no
// pattern of exclude. Every name is checked with CheckName.
func (c *Client) Files(ctx context.Context, repo, commit string, include, exclude []string) ([]File, error) {
	if err := CheckPatterns(include); err != nil {
		return nil, err
	}
	if err := CheckPatterns(exclude); err != nil {
		return nil, err
	}
	entries, err := c.ListTree(ctx, repo, commit)
	if noTree(err) {
		return c.filesFromSiblings(ctx, repo, commit, include, exclude, err)
	}
	if err != nil {
		return nil, err
	}
	var files []File
	dup := map[string]bool{}
	for _, e := range entries {
		if e.Type != "file" {
			continue
		}
		if err := CheckName(e.Path); err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		if dup[e.Path] {
			return nil, fmt.Errorf("listing files of %s at %s: %q listed twice", repo, commit, e.Path)
		}
		dup[e.Path] = true
		if len(include) > 0 && !Match(include, e.Path) {
			continue
		}
		if Match(exclude, e.Path) {
			continue
		}
		f := File{Path: e.Path, URL: c.ResolveURL(repo, commit, e.Path), Size: e.Size}
		if e.LFS != nil {
			if !hexOf(e.LFS.OID, 64) {
				return nil, fmt.Errorf("listing files of %s at %s: %q has LFS oid %q, want a sha256", repo, commit, e.Path, e.LFS.OID)
			}
			f.SHA256 = e.LFS.OID
			if e.LFS.Size > 0 {
				f.Size = e.LFS.Size
			}
		} else {
			if !hexOf(e.OID, 40) {
				return nil, fmt.Errorf("listing files of %s at %s: %q has oid %q, want a git sha1", repo, commit, e.Path, e.OID)
			}
			f.GitSHA1 = e.OID
		}
		files = append(files, f)
	}
	return files, nil
}

// noTree reports whether a listing failed because the endpoint does not serve the tree API
// (a mirror: 404, 405 or 501 without the hub's X-Error-Code), not because the hub said the
// repository or revision does not exist.
func noTree(err error) bool {
	var api *APIError
	if !errors.As(err, &api) || api.Code != "" {
		return false
	}
	return api.Status == http.StatusNotFound || api.Status == http.StatusMethodNotAllowed || api.Status == http.StatusNotImplemented
}

// headWorkers is how many HEAD requests filesFromSiblings makes at once.
const headWorkers = 8

// filesFromSiblings lists the files of repo at commit as huggingface_hub does where there
// is no tree API: the names from the revision's siblings, and for each file that include
// and exclude keep, a HEAD of its resolve URL (the redirect not followed): X-Linked-Etag
// is an LFS file's sha256 and X-Linked-Size its size; a file kept in git has its blob
// sha1 as ETag and its size as Content-Length.
func (c *Client) filesFromSiblings(ctx context.Context, repo, commit string, include, exclude []string, treeErr error) ([]File, error) {
	u := c.Endpoint() + "/api/models/" + repo + "/revision/" + url.PathEscape(commit)
	var info struct {
		Siblings []struct {
			RFilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := c.getJSON(ctx, u, repo, commit, &info, nil); err != nil {
		return nil, fmt.Errorf("listing files of %s at %s: no tree listing (%v), and the revision's siblings: %w", repo, commit, treeErr, err)
	}
	var files []File
	dup := map[string]bool{}
	for _, sib := range info.Siblings {
		name := sib.RFilename
		if err := CheckName(name); err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		if dup[name] {
			return nil, fmt.Errorf("listing files of %s at %s: %q listed twice", repo, commit, name)
		}
		dup[name] = true
		if (len(include) > 0 && !Match(include, name)) || Match(exclude, name) {
			continue
		}
		files = append(files, File{Path: name, URL: c.ResolveURL(repo, commit, name)})
	}
	errs := make([]error, len(files))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(headWorkers, len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs[i] = c.retry(ctx, "hub HEAD of "+redact.URL(files[i].URL), func() (bool, error) { return c.headFile(ctx, repo, commit, &files[i]) })
			}
		}()
	}
	for i := range files {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("listing files of %s at %s from the revision's siblings: %w", repo, commit, err)
	}
	return files, nil
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

// CheckName refuses a file name that is empty, absolute, or has an empty, "." or ".."
// element, or a backslash or NUL: such a name could write outside the destination.
func CheckName(name string) error {
	if name == "" {
		return errors.New("refusing an empty file name")
	}
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("refusing file name %q: not a relative path", name)
	}
	for _, el := range strings.Split(name, "/") {
		switch el {
		case "", ".", "..":
			return fmt.Errorf("refusing file name %q: it has a %q element", name, el)
		}
	}
	return nil
}

// CheckPatterns reports a malformed glob pattern.
func CheckPatterns(patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("bad file pattern %q: %w", p, err)
		}
	}
	return nil
}

// Match reports whether name matches any of patterns. A pattern matches (with path.Match)
// the full path or the base name; "**" in a pattern also matches across "/" (as in
// "subdir/**").
func Match(patterns []string, name string) bool {
	base := path.Base(name)
	for _, p := range patterns {
		if strings.Contains(p, "**") {
			if matchDoubleStar(p, name) {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, name); ok {
			return true
		}
		if ok, _ := path.Match(p, base); ok {
			return true
		}
	}
	return false
}

// matchDoubleStar matches a pattern in which "**" stands for any run of characters,
// "/" included, and the rest has path.Match semantics per element run.
func matchDoubleStar(pattern, name string) bool {
	parts := strings.Split(pattern, "**")
	var re strings.Builder
	re.WriteString("^")
	for i, part := range parts {
		if i > 0 {
			re.WriteString(".*")
		}
		for _, r := range part {
			switch r {
			case '*':
				re.WriteString("[^/]*")
			case '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
	}
	re.WriteString("$")
	ok, err := regexp.MatchString(re.String(), name)
	return err == nil && ok
}

// nextLink returns the rel="next" target of a Link header, resolved against the page URL.
func nextLink(h http.Header, page string) (string, error) {
	for _, v := range h.Values("Link") {
		for _, link := range strings.Split(v, ",") {
			link = strings.TrimSpace(link)
			if !strings.HasPrefix(link, "<") {
				continue
			}
			end := strings.Index(link, ">")
			if end < 0 {
				continue
			}
			target := link[1:end]
			isNext := false
			for _, param := range strings.Split(link[end+1:], ";") {
				param = strings.TrimSpace(param)
				if k, v, ok := strings.Cut(param, "="); ok && strings.EqualFold(strings.TrimSpace(k), "rel") {
					for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"`)) {
						if strings.EqualFold(rel, "next") {
							isNext = true
						}
					}
				}
			}
			if !isNext {
				continue
			}
			base, err := url.Parse(page)
			if err != nil {
				return "", fmt.Errorf("parsing page URL: %w", err)
			}
			ref, err := url.Parse(target)
			if err != nil {
				return "", fmt.Errorf("parsing next-page link %q: %w", target, err)
			}
			return base.ResolveReference(ref).String(), nil
		}
	}
	return "", nil
}

// APIError is an error answer from the hub. Its message says what to do and never
// contains the token.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the hub's X-Error-Code (RepoNotFound, GatedRepo, RevisionNotFound, ...).
	Code string
	// Message is the hub's X-Error-Message or a short body excerpt.
	Message string
	// Hint says what to do about it.
	Hint string
	// after is the wait the answer asked for (Retry-After, RateLimit), or 0.
	after time.Duration
}

// Error implements error.
func (e *APIError) Error() string {
	s := fmt.Sprintf("hub answered %d %s", e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Hint != "" {
		s += "; " + e.Hint
	}
	return s
}

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

func (c *Client) apiError(resp *http.Response, repo, rev string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	e := &APIError{Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code"), Message: resp.Header.Get("X-Error-Message"),
		after: httpwait.ServerWait(resp.Header, time.Now())}
	if e.Message == "" {
		var j struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &j) == nil && j.Error != "" {
			e.Message = j.Error
		} else {
			e.Message = strings.TrimSpace(string(body))
			if len(e.Message) > 200 {
				e.Message = e.Message[:200] + "..."
			}
		}
	}
	e.Message = c.redact(e.Message)
	e.Hint = c.Hint(resp.StatusCode, e.Code, e.Message, repo, rev)
	return e
}

// Refused reports whether an answer with this status and X-Error-Code refuses access to
// the repository (gated, private, a token that is invalid or without access), as opposed
// to a missing file or revision or a passing fault.
func Refused(status int, code string) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || code == "GatedRepo" || code == "RepoNotFound"
}

// Hint says what causes a refused or failed answer about repo at rev, and what fixes it,
// from its status and the hub's X-Error-Code and X-Error-Message; "" when there is
// nothing to say.
func (c *Client) Hint(status int, code, message, repo, rev string) string {
	page := c.shownEndpoint() + "/" + repo
	switch {
	case message == "Access to this resource is disabled.":
		return fmt.Sprintf("the hub has disabled %s: nothing on this host can fix it; pin another repository", repo)
	case message == "Invalid credentials in Authorization header":
		return fmt.Sprintf("the hub does not know this token (mistyped, revoked or expired): make a read token at %s/settings/tokens and put it in hf.token_file or HF_TOKEN", c.shownEndpoint())
	case code == "GatedRepo" && c.token == "":
		return fmt.Sprintf("%s is gated: accept its licence at %s with your account, then set hf.token_file (or HF_TOKEN) to a read token of that account", repo, page)
	case code == "GatedRepo":
		return fmt.Sprintf("%s is gated and the token's account has no access (yet): accept the licence at %s with the account the token belongs to (some repositories also wait for the authors' approval), or use a token of an account that has access; a fine-grained token also needs read access to gated repositories", repo, page)
	case code == "RevisionNotFound" || code == "EntryNotFound":
		return fmt.Sprintf("check the revision %q of %s (a branch, tag or 40-hex commit that exists)", rev, repo)
	case (code == "RepoNotFound" || status == http.StatusUnauthorized) && c.token == "":
		return fmt.Sprintf("check that the repository %q exists; if it is private or gated, set hf.token_file (or HF_TOKEN) to a read token of an account with access (for a gated one, accept its licence at %s first)", repo, page)
	case code == "RepoNotFound" || status == http.StatusUnauthorized:
		return fmt.Sprintf("%q does not exist or the token cannot read it: check the name, and that the token's account has access to it (a private repository of another account or organisation, or a fine-grained token without read access to it)", repo)
	case status == http.StatusForbidden:
		return fmt.Sprintf("the hub refused the token for %s: give it read access (a fine-grained token without access to this repository, or a write-only one), or use another", repo)
	case status == http.StatusNotFound:
		return fmt.Sprintf("check the repository name %q and the revision %q", repo, rev)
	case status == http.StatusTooManyRequests:
		return "the hub rate-limits this client (5-minute windows): wait and retry, or use a token (its limits are higher)"
	}
	return ""
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

// redact removes the token, and the user information of every URL, from s.
func (c *Client) redact(s string) string {
	s = redact.Userinfo(s)
	if c.token == "" {
		return s
	}
	return strings.ReplaceAll(s, c.token, "[token]")
}

// scrub returns err with the token, and the user information of every URL, removed from
// its text.
func (c *Client) scrub(err error) error {
	if c.token != "" && strings.Contains(err.Error(), c.token) {
		return errors.New(c.redact(err.Error()))
	}
	return redact.Error(err)
}

// shownEndpoint is the endpoint as errors and hints show it: without user information.
func (c *Client) shownEndpoint() string { return redact.URL(c.Endpoint()) }
