package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/sglprov/sglprov/pkg/fetch"
)

// Annotations on layers.
const (
	annotationMode = "org.sglprov.mode"
	// mediaTypeFile is the media type of a layer: one file's bytes, as they are.
	mediaTypeFile = "application/vnd.sglprov.file.v1"
	// maxManifest bounds a manifest or config read from the registry.
	maxManifest = 16 << 20
)

// ErrNotAskedAgain is in the error of every call to a registry that this Registry gave up
// on earlier in the run: it did not answer within Options.Timeout, or a blob transfer
// stalled (pkg/fetch's stall timeout ran out). Callers take what they wanted from the
// origin without asking the registry again.
var ErrNotAskedAgain = errors.New("not asked again in this run")

// Options are what New needs besides the Config.
type Options struct {
	// Getenv reads DOCKER_CONFIG and HOME (default os.Getenv).
	Getenv func(string) string
	// Transport carries the requests (default: one tuned for many parallel ranges).
	Transport http.RoundTripper
	// Logf receives one line per pushed file (default: discarded).
	Logf func(format string, args ...any)
	// ChunkSize is the size of one chunk of a blob upload (default 64 MiB).
	ChunkSize int64
	// UploadDir, when set, keeps where each unfinished upload stands, so that a push that
	// a killed run left half done continues there.
	UploadDir string
	// Fetch tunes the downloads of Pull (Dest and Client are set by Pull).
	Fetch fetch.Options
	// Timeout bounds one exchange with the registry that moves no file's bytes (a tag
	// or blob lookup, a manifest, an upload's start or status), token requests included
	// (default 30 s). A registry that does not answer within it is not asked again by
	// this Registry: later calls fail at once, and the steps fall back to the origin.
	Timeout time.Duration
}

// Registry is a Cache on an OCI registry repository.
type Registry struct {
	cfg       Config
	repo      *remote.Repository
	auth      *auth.Client
	client    *http.Client
	base      string // scheme://host[:port]
	path      string // the repository's path
	logf      func(string, ...any)
	chunkSize int64
	uploadDir string
	fetchOpt  fetch.Options
	timeout   time.Duration
	// configPath is the docker config the credentials come from (named in errors).
	configPath string

	mu   sync.Mutex
	down error // set when the registry did not answer within timeout
}

var repoRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

// New returns the cache on cfg.Repository. It reads the docker config for credentials but
// does not contact the registry.
func New(cfg Config, opt Options) (*Registry, error) {
	host, path, ok := strings.Cut(strings.TrimSuffix(cfg.Repository, "/"), "/")
	if !ok || host == "" || !repoRE.MatchString(path) {
		return nil, fmt.Errorf("cache.oci %q: want HOST[:PORT]/PATH, with a lower-case path (e.g. registry.internal:5000/fleet/sglprov)", cfg.Repository)
	}
	if strings.Contains(cfg.Repository, "://") {
		return nil, fmt.Errorf("cache.oci %q: give the repository without a scheme (plain_http: true for HTTP)", cfg.Repository)
	}
	repo, err := remote.NewRepository(host + "/" + path)
	if err != nil {
		return nil, fmt.Errorf("cache.oci %q: %w", cfg.Repository, err)
	}
	getenv := opt.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	configPath := dockerConfigPath(getenv)
	store, err := credentials.NewStore(configPath, credentials.StoreOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the docker config for the cache's credentials: %w", err)
	}
	tr := opt.Transport
	if tr == nil {
		t := &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   15 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			ForceAttemptHTTP2:     false,
			// Blobs are stored compressed or not at all; let the bytes through as they are.
			DisableCompression: true,
		}
		// Each range of a pull on a connection of its own, as the hub's downloads.
		fetch.HTTP1Only(t)
		tr = t
	}
	plain := cfg.PlainHTTP || isLoopback(host)
	if !plain {
		// Every request, the token service's and a redirect's included, goes over TLS.
		tr = httpsOnly{next: tr}
	}
	ac := &auth.Client{
		// Redirects (to a blob store) are followed by the outer client, one hop at a
		// time, so that each hop is authorized for its own host only.
		Client:     &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		Cache:      auth.NewCache(),
		Credential: credentials.Credential(store),
		Header:     http.Header{"User-Agent": {"sglprov"}},
	}
	repo.Client = ac
	repo.PlainHTTP = plain
	scheme := "https"
	if plain {
		scheme = "http"
	}
	r := &Registry{
		cfg: cfg, repo: repo, auth: ac, base: scheme + "://" + host, path: path,
		logf: opt.Logf, chunkSize: opt.ChunkSize, uploadDir: opt.UploadDir, fetchOpt: opt.Fetch,
		timeout: opt.Timeout, configPath: configPath,
	}
	if r.timeout <= 0 {
		r.timeout = 30 * time.Second
	}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	if r.chunkSize <= 0 {
		r.chunkSize = 64 << 20
	}
	r.client = &http.Client{Transport: &authTransport{r: r}}
	return r, nil
}

// dockerConfigPath is DOCKER_CONFIG/config.json, else ~/.docker/config.json (~ from HOME,
// else the password database).
func dockerConfigPath(getenv func(string) string) string {
	if d := getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	home := getenv("HOME")
	if home == "" {
		// cloud-init's runcmd and system services without User= run with no HOME: the
		// user's home folder from the password database, as docker itself finds it.
		if u, err := user.Current(); err == nil {
			home = u.HomeDir
		}
	}
	return filepath.Join(home, ".docker", "config.json")
}

// isLoopback reports whether host (with an optional port) is a loopback address.
func isLoopback(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

// httpsOnly refuses requests that are not HTTPS: with plain_http false, a bearer token
// realm or a redirect to http:// would otherwise carry credentials or the files in the
// clear.
type httpsOnly struct{ next http.RoundTripper }

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("refusing plain HTTP to %s (cache.plain_http is false; the registry named an http:// URL for a token or a redirect)", req.URL.Host)
	}
	return h.next.RoundTrip(req)
}

// authTransport sends each request through the auth client, with a pull scope on the
// repository: the bearer token flow runs once and its token is cached.
type authTransport struct{ r *Registry }

// A registry given up on in this run (it did not answer, or a blob stalled) is not asked
// again: the request fails at once. A blob transfer that pkg/fetch cancels for a stall
// gives up on the registry: one stall timeout per registry per run, not one per try of
// every file.
func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.r.unreachable(); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		// pkg/fetch fails the file at once on it rather than retrying for its budget.
		return nil, fmt.Errorf("%w (%w)", err, fetch.ErrNoRetry)
	}
	ctx := auth.AppendRepositoryScope(req.Context(), t.r.repo.Reference, auth.ActionPull)
	resp, err := t.r.auth.Do(req.WithContext(ctx))
	if err != nil {
		t.r.noteStall(req.Context())
		return nil, err
	}
	resp.Body = &stallNoter{ReadCloser: resp.Body, ctx: req.Context(), r: t.r}
	return resp, nil
}

// String names the repository.
func (r *Registry) String() string { return r.cfg.Repository }

// MinRate is the fewest bytes per second a blob's answer may bring over
// fetch.DefaultMinRateWindow before the registry is given up for the run (cache.min_rate;
// DefaultMinRate when not set; 0 when turned off).
func (r *Registry) MinRate() int64 {
	switch {
	case r.cfg.MinRate < 0:
		return 0
	case r.cfg.MinRate == 0:
		return DefaultMinRate
	}
	return r.cfg.MinRate
}

// CanPush reports whether this node publishes.
func (r *Registry) CanPush() bool { return r.cfg.Push }

// HTTPClient returns a client that authenticates to the registry.
func (r *Registry) HTTPClient() *http.Client { return r.client }

// Push uploads every file the registry lacks (streamed from disk, in resumable chunks),
// then the config and the manifest, tagged tag.
func (r *Registry) Push(ctx context.Context, tag, kind string, meta []byte, files []File) (*Artifact, error) {
	if !r.cfg.Push {
		return nil, fmt.Errorf("pushing to %s: this node is pull-only (cache.push is false)", r)
	}
	pctx := auth.AppendRepositoryScope(ctx, r.repo.Reference, auth.ActionPull, auth.ActionPush)
	layers, err := r.pushBlobs(pctx, files)
	if err != nil {
		return nil, err
	}
	cfg := ocispec.Descriptor{MediaType: kind + "+json", Digest: digest.FromBytes(meta), Size: int64(len(meta))}
	if ok, err := r.exists(pctx, cfg); err != nil {
		return nil, fmt.Errorf("pushing the config: %w", err)
	} else if !ok {
		bctx, done, err := r.bounded(pctx)
		if err == nil {
			err = done(r.repo.Blobs().Push(bctx, cfg, bytes.NewReader(meta)))
		}
		if err != nil {
			return nil, fmt.Errorf("pushing the config: %w", err)
		}
	}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: kind,
		Config:       cfg,
		Layers:       layers,
		Annotations:  manifestAnnotations(ctx, time.Now()),
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the manifest: %w", err)
	}
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(b), Size: int64(len(b))}
	bctx, done, err := r.bounded(pctx)
	if err == nil {
		err = done(r.repo.PushReference(bctx, md, bytes.NewReader(b), tag))
	}
	if err != nil {
		return nil, fmt.Errorf("pushing the manifest %s:%s: %w", r, short(tag), err)
	}
	out := &Artifact{Digest: md.Digest.String(), Tag: tag, Kind: kind, Meta: meta}
	for _, f := range files {
		f.Path = ""
		out.Files = append(out.Files, f)
	}
	return out, nil
}

// Tag tags the manifest with digest d (sha256:<hex>) with tag too, as Push would have:
// nothing but the tag is sent.
func (r *Registry) Tag(ctx context.Context, d, tag string) error {
	if !r.cfg.Push {
		return fmt.Errorf("tagging %s:%s: this node is pull-only (cache.push is false)", r, short(tag))
	}
	pctx := auth.AppendRepositoryScope(ctx, r.repo.Reference, auth.ActionPull, auth.ActionPush)
	bctx, done, err := r.bounded(pctx)
	if err == nil {
		var desc ocispec.Descriptor
		desc, err = r.repo.Resolve(bctx, d)
		if err == nil {
			err = r.repo.Tag(bctx, desc, tag)
		}
		err = done(err)
	}
	if err != nil {
		return fmt.Errorf("tagging %s %s:%s: %w", d, r, short(tag), r.hint(err))
	}
	return nil
}

var _ Tagger = (*Registry)(nil)

// hint adds the fix to an error that says the registry wants credentials.
func (r *Registry) hint(err error) error {
	if err == nil {
		return nil
	}
	var er *errcode.ErrorResponse
	var he *httpError
	if errors.Is(err, auth.ErrBasicCredentialNotFound) ||
		errors.As(err, &er) && er.StatusCode == http.StatusUnauthorized ||
		errors.As(err, &he) && he.code == http.StatusUnauthorized {
		host, _, _ := strings.Cut(r.cfg.Repository, "/")
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		defer cancel()
		if c, cerr := r.auth.Credential(ctx, host); cerr == nil && c != auth.EmptyCredential {
			return fmt.Errorf("%w (the registry refused the credentials for %s in %s: `docker login %s` renews them)", err, host, r.configPath, host)
		}
		return fmt.Errorf("%w (the registry wants credentials: `docker login %s` writes them to ~/.docker/config.json, or $DOCKER_CONFIG/config.json)", err, host)
	}
	return err
}

// short shortens a fingerprint tag for messages.
func short(tag string) string {
	if len(tag) > 16 {
		return tag[:16] + "…"
	}
	return tag
}

// FileSHA256 hashes the file at path (for files whose digest is not yet known).
func FileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
