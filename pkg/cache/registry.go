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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
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

// stallNoter tells the registry when a read of a body fails because pkg/fetch cancelled
// the request for a stall.
type stallNoter struct {
	io.ReadCloser
	ctx context.Context
	r   *Registry
}

func (s *stallNoter) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		s.r.noteStall(s.ctx)
	}
	return n, err
}

// Close closes the body; one closed after pkg/fetch cancelled its request for a stall or
// a trickle below the minimum rate (the reader stopped reading) gives up on the registry.
func (s *stallNoter) Close() error {
	s.r.noteStall(s.ctx)
	return s.ReadCloser.Close()
}

// noteStall gives up on the registry for the rest of the run when ctx was cancelled for a
// stall (no byte, headers included, for the stall timeout) or a trickle (below
// cache.min_rate), and says so once.
func (r *Registry) noteStall(ctx context.Context) {
	var why string
	var se *fetch.StallError
	var slow *fetch.SlowError
	switch cause := context.Cause(ctx); {
	case errors.As(cause, &se):
		why = fmt.Sprintf("sent no byte of a blob (or of its answer's headers) for %s", se.Timeout)
	case errors.As(cause, &slow):
		why = fmt.Sprintf("sent %s of a blob in %s, below cache.min_rate (%s/s)", fetch.FormatBytes(slow.Got), slow.Window, fetch.FormatBytes(slow.MinRate))
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down != nil {
		return
	}
	r.down = fmt.Errorf("the registry %s %s; it is %w", r, why, ErrNotAskedAgain)
	r.logf("the registry %s %s: it is not asked again in this run, and every file still to fetch comes from its origin (the hub, or a build)", r, why)
}

// bounded returns ctx limited to the registry's timeout, and a function that turns the
// error of the exchange into one that says the registry did not answer, when that is what
// happened, and remembers it: a registry that accepts connections and never answers costs
// one timeout per run, not one per step or per file. It fails at once when the registry
// already did not answer.
func (r *Registry) bounded(ctx context.Context) (context.Context, func(error) error, error) {
	if err := r.unreachable(); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	return cctx, func(err error) error {
		defer cancel()
		var ne net.Error
		if err == nil || ctx.Err() != nil || !(cctx.Err() != nil || errors.As(err, &ne) && ne.Timeout()) {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down == nil {
			r.down = fmt.Errorf("the registry %s did not answer within %s; it is %w: %w", r, r.timeout, ErrNotAskedAgain, context.DeadlineExceeded)
		}
		return r.down
	}, nil
}

// unreachable is the error of a registry that did not answer earlier in this run, or nil.
func (r *Registry) unreachable() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down
}

// GaveUp returns why the registry is not asked again in this run, or nil.
func (r *Registry) GaveUp() error { return r.unreachable() }

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

// BlobURL returns the URL of a blob by its sha256.
func (r *Registry) BlobURL(sha string) string {
	return r.base + "/v2/" + r.path + "/blobs/sha256:" + sha
}

// blobURL is the URL of the blob d.
func (r *Registry) blobURL(d digest.Digest) string {
	return r.base + "/v2/" + r.path + "/blobs/" + d.String()
}

// HasBlob reports whether the registry holds the blob.
func (r *Registry) HasBlob(ctx context.Context, sha string) (bool, error) {
	d := digest.NewDigestFromEncoded(digest.SHA256, sha)
	if err := d.Validate(); err != nil {
		return false, fmt.Errorf("blob digest %q: %w", sha, err)
	}
	return r.exists(ctx, ocispec.Descriptor{Digest: d})
}

// exists asks the registry for a blob, within the registry's timeout.
func (r *Registry) exists(ctx context.Context, desc ocispec.Descriptor) (bool, error) {
	bctx, done, err := r.bounded(ctx)
	if err != nil {
		return false, err
	}
	ok, err := r.headBlob(bctx, desc.Digest)
	if err = done(err); err != nil {
		return false, fmt.Errorf("asking %s for blob %s: %w", r, desc.Digest, r.hint(err))
	}
	return ok, nil
}

// headBlob asks whether the registry holds the blob d. Blob requests go through
// HTTPClient, which follows a redirect (a registry that keeps its blobs in object storage
// answers 307 to a signed URL on another host) hop by hop, each hop authorized for its own
// host only: the registry's credentials never reach the blob store.
func (r *Registry) headBlob(ctx context.Context, d digest.Digest) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, r.blobURL(d), nil)
	if err != nil {
		return false, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, statusError(resp)
}

// getBlob fetches the blob d (through HTTPClient, as headBlob) and returns its body.
func (r *Registry) getBlob(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.blobURL(d), nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, statusError(resp)
	}
	return resp.Body, nil
}

// Lookup fetches the manifest tagged tag and its config, checking both digests.
func (r *Registry) Lookup(ctx context.Context, tag string) (_ *Artifact, err error) {
	ctx, done, err := r.bounded(ctx)
	if err != nil {
		return nil, fmt.Errorf("looking up %s:%s: %w", r, short(tag), err)
	}
	defer func() {
		if err != nil {
			if derr := done(err); derr != err {
				err = fmt.Errorf("looking up %s:%s: %w", r, short(tag), derr)
			}
			return
		}
		done(nil)
	}()
	desc, rc, err := r.repo.FetchReference(ctx, tag)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up %s:%s: %w", r, short(tag), r.hint(err))
	}
	b, err := readAll(rc, desc.Size)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s:%s: %w", r, short(tag), err)
	}
	got := digest.FromBytes(b)
	if desc.Digest != "" && desc.Digest != got {
		return nil, fmt.Errorf("manifest %s:%s: the registry says %s, the bytes are %s", r, short(tag), desc.Digest, got)
	}
	if len(r.cfg.Digests) > 0 && !slices.Contains(r.cfg.Digests, got.String()) {
		return nil, fmt.Errorf("artifact %s (%s:%s) is not in cache.digests", got, r, short(tag))
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest %s:%s: %w", r, short(tag), err)
	}
	a := &Artifact{Digest: got.String(), Tag: tag, Kind: m.ArtifactType}
	if a.Kind == "" {
		a.Kind = m.Config.MediaType
	}
	if m.Config.Size > maxManifest {
		return nil, fmt.Errorf("manifest %s: config of %d bytes is too large", got, m.Config.Size)
	}
	if m.Config.Digest.Validate() != nil {
		return nil, fmt.Errorf("manifest %s: config digest %q", got, m.Config.Digest)
	}
	crc, err := r.getBlob(ctx, m.Config.Digest)
	if err != nil {
		return nil, fmt.Errorf("fetching the config of %s: %w", got, r.hint(err))
	}
	a.Meta, err = readAll(crc, m.Config.Size)
	crc.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the config of %s: %w", got, err)
	}
	if d := digest.FromBytes(a.Meta); d != m.Config.Digest {
		return nil, fmt.Errorf("config of %s: digest %s, want %s", got, d, m.Config.Digest)
	}
	for i, l := range m.Layers {
		if l.Digest.Algorithm() != digest.SHA256 || l.Digest.Validate() != nil {
			return nil, fmt.Errorf("manifest %s: layer %d has digest %q, want sha256", got, i, l.Digest)
		}
		if l.Size < 0 {
			// pkg/fetch reads a file of unknown size until the server stops.
			return nil, fmt.Errorf("manifest %s: layer %d has size %d", got, i, l.Size)
		}
		name := l.Annotations[ocispec.AnnotationTitle]
		if name == "" {
			return nil, fmt.Errorf("manifest %s: layer %d has no %s", got, i, ocispec.AnnotationTitle)
		}
		f := File{Name: name, Size: l.Size, SHA256: l.Digest.Encoded()}
		if m, err := strconv.ParseUint(l.Annotations[annotationMode], 8, 32); err == nil {
			f.Mode = BoundMode(os.FileMode(m & 0o777))
		}
		a.Files = append(a.Files, f)
	}
	return a, nil
}

// readAll reads rc, which must hold size bytes (at most maxManifest; size < 0: any
// number up to maxManifest).
func readAll(rc io.Reader, size int64) ([]byte, error) {
	if size > maxManifest {
		return nil, fmt.Errorf("%d bytes is too large", size)
	}
	limit := int64(maxManifest)
	if size >= 0 {
		limit = size
	}
	// One byte more than the descriptor says is read, to tell a longer body; no more.
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than %d bytes", limit)
	}
	if size >= 0 && int64(len(b)) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}

// Pull downloads the files of a into dir with the parallel ranged downloader.
func (r *Registry) Pull(ctx context.Context, a *Artifact, dir string) error {
	var files []fetch.File
	for _, f := range a.Files {
		files = append(files, fetch.File{URL: r.BlobURL(f.SHA256), Path: f.Name, Size: f.Size, SHA256: f.SHA256})
	}
	if err := r.unreachable(); err != nil {
		return fmt.Errorf("pulling %s: %w", a.Digest, err)
	}
	opt := r.fetchOpt
	opt.Dest, opt.Client = dir, r.client
	if opt.ChunkSize == 0 {
		opt.ChunkSize = ChunkSize
	}
	if opt.MinRate == 0 {
		opt.MinRate = r.MinRate()
	}
	if opt.NoProgress == 0 {
		// The registry only spares the origin (a build, the hub): a blob it stops serving
		// is built or fetched there instead, after two stall timeouts, not ten minutes.
		opt.NoProgress = 2 * opt.StallTimeout
		if opt.NoProgress == 0 {
			opt.NoProgress = 2 * DefaultStallTimeout
		}
	}
	if _, err := fetch.Fetch(ctx, files, opt); err != nil {
		return fmt.Errorf("pulling %s: %w", a.Digest, err)
	}
	for _, f := range a.Files {
		if f.Mode != 0 {
			if err := os.Chmod(filepath.Join(dir, filepath.FromSlash(f.Name)), BoundMode(f.Mode)); err != nil {
				return fmt.Errorf("pulling %s: %w", a.Digest, err)
			}
		}
	}
	return nil
}

// BoundMode is the mode a pulled file gets from the mode its artifact names (the pushing
// node's permission bits): at most 0755 for a file that someone could execute there (and
// then the owner can), at most 0644 otherwise. Group and other never get write, and no
// setuid, setgid or sticky bit survives: an artifact cannot make a restored file one that
// anyone may change, or one that runs as its owner.
func BoundMode(m os.FileMode) os.FileMode {
	perm := m.Perm() & 0o755
	if perm&0o111 != 0 {
		perm |= 0o100
	}
	return perm
}

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
