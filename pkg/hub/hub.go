// Package hub is a client for the Hugging Face hub's HTTP API: it resolves a revision to a
// commit, lists a repository's files at that commit with their sizes and digests, and builds
// the resolve URLs the files are downloaded from.
package hub

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
	// RetryWait is the wait before the first retry; it doubles each time, up to netretry.MaxWait (0: 1s).
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
