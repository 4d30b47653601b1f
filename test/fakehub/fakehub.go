// Package fakehub is a fake Hugging Face hub for tests and demos: it serves one repository
// from a file set with the hub's revision, tree-listing (paginated as the hub pages it) and
// resolve endpoints, redirecting large files to a second "CDN" server with signed URLs that
// expire, as the real hub does, with Range support, gated and private access as the hub
// answers it, injected 429s, optional TLS with h2, and counters of what it served.
// README.md lists every way it differs from the real hub.
package fakehub

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCommit is the commit the fake repository is at unless Options names one.
const DefaultCommit = "0123456789abcdef0123456789abcdef01234567"

// Options configures a Hub.
type Options struct {
	// Repo is the repository id served, e.g. "org/model".
	Repo string
	// FS holds the repository's files (os.DirFS or fstest.MapFS).
	FS fs.FS
	// Commit is the repository's commit; "" means DefaultCommit.
	Commit string
	// Refs maps branch and tag names to commits; "main" maps to Commit unless set.
	Refs map[string]string
	// PageSize is the number of entries per tree-listing page; 0 means 1000, as the real
	// hub pages a listing without expand.
	PageSize int
	// ExpandPageSize is the number of entries per page of a listing asked with
	// expand=true; 0 means 50, as the real hub pages it.
	ExpandPageSize int
	// LFSThreshold is the size from which a file is listed as an LFS file (with its
	// sha256) and its resolve URL redirects to the CDN; 0 means 1 MiB.
	LFSThreshold int64
	// Token, when set, is the one token with access to the repository. As on the real hub,
	// a gated repository (the default when Token is set) answers the API (revision, tree)
	// to anyone and refuses only resolve: no token gets 401 with X-Error-Code GatedRepo, a
	// token of DeniedTokens (an account that has not accepted the licence) 403 GatedRepo,
	// any other token 401 "Invalid credentials in Authorization header".
	Token string
	// Private makes the repository private: every endpoint, the API included, refuses a
	// request without Token as the real hub does (401 RepoNotFound, as for a repository
	// that does not exist).
	Private bool
	// DeniedTokens are valid tokens of accounts without access (see Token).
	DeniedTokens []string
	// ExtraListing adds entries to the tree listing (e.g. a "../x" file) as given.
	ExtraListing []Entry
	// CDNHost is the host name the CDN's redirect URLs use instead of the listener's
	// address (with the CDN's port), e.g. "localhost", so that it differs from the hub's.
	CDNHost string
	// NextHost, when set, is the host the tree listing's Link: rel="next" names instead of
	// the request's (a mirror that names its upstream, or a hostile one).
	NextHost string
	// NoTree makes the hub answer 404 to /api/models/{repo}/tree, as mirrors that proxy
	// only the revision API and resolve do (Artifactory, Nexus).
	NoTree bool
	// Rate, when positive, bounds each file response to this many bytes per second, as
	// the real hub throttles a connection.
	Rate int64
	// SignedURLTTL is how long a CDN URL that a redirect hands out stays valid (0: one
	// hour, as the real hub's signed URLs); after it the CDN answers 403, as CloudFront and
	// S3 do for an expired signature, and the client must ask resolve again.
	SignedURLTTL time.Duration
	// TLS makes Start serve the hub and the CDN over TLS offering h2 and HTTP/1.1, as the
	// real ones do; Client trusts their certificate.
	TLS bool
	// EndlessPages is a fault (a broken or hostile mirror): the tree listing never ends;
	// past its last entry every page is empty and names a next page one cursor further.
	EndlessPages bool
	// Redirect is a fault (a broken or hostile mirror): "file" answers every API and
	// resolve request with a 302 to file:///etc/passwd, "loop" with a 302 to the URL
	// asked for itself.
	Redirect string
}

// Entry is a tree-listing entry in the hub's JSON shape.
type Entry struct {
	// Type is "file" or "directory".
	Type string `json:"type"`
	// OID is the git object id (a file's blob sha1; for an LFS file, its pointer's).
	OID string `json:"oid"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// Path is the path in the repository.
	Path string `json:"path"`
	// LFS is set for LFS files (with or without expand, as on the real hub).
	LFS *LFS `json:"lfs,omitempty"`
}

// LFS is an entry's large-file metadata.
type LFS struct {
	// OID is the file's sha256, hex.
	OID string `json:"oid"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// PointerSize is the size of the git pointer file.
	PointerSize int64 `json:"pointerSize"`
}

type fileInfo struct {
	size   int64
	sha256 string
	sha1   string
}

// Hub is a fake hub. Its handlers can be served by httptest servers (Start) or by real
// listeners (the fake-hub command).
type Hub struct {
	opt Options

	mu       sync.Mutex
	files    map[string]fileInfo
	paths    []string
	dirs     []string
	cdnBase  string
	authSeen []string

	// rateLimited is how many resolve requests are still to be answered 429.
	rateLimited atomic.Int64
	// expired counts CDN requests refused for an expired signature.
	expired atomic.Int64
	// conns counts the TCP connections each server accepted (hub, CDN).
	hubConns, cdnConns atomic.Int64

	bytesServed  atomic.Int64
	fileRequests atomic.Int64
	apiRequests  atomic.Int64
	treePages    atomic.Int64

	// servers started by Start
	hubSrv, cdnSrv *httptest.Server
}

// New indexes the file set (sizes and digests) and returns a hub serving it.
func New(opt Options) (*Hub, error) {
	if opt.Repo == "" {
		return nil, fmt.Errorf("fake hub: no repo")
	}
	if opt.Commit == "" {
		opt.Commit = DefaultCommit
	}
	if opt.PageSize <= 0 {
		opt.PageSize = 1000
	}
	if opt.ExpandPageSize <= 0 {
		opt.ExpandPageSize = 50
	}
	if opt.SignedURLTTL <= 0 {
		opt.SignedURLTTL = time.Hour
	}
	if opt.LFSThreshold <= 0 {
		opt.LFSThreshold = 1 << 20
	}
	refs := map[string]string{"main": opt.Commit}
	for k, v := range opt.Refs {
		refs[k] = v
	}
	opt.Refs = refs
	h := &Hub{opt: opt, files: map[string]fileInfo{}}
	if err := h.index(); err != nil {
		return nil, err
	}
	return h, nil
}

// Reindex re-reads the file set (after a test changed a file).
func (h *Hub) Reindex() error { return h.index() }

func (h *Hub) index() error {
	files := map[string]fileInfo{}
	var paths, dirs []string
	err := fs.WalkDir(h.opt.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		fi, err := digest(h.opt.FS, p)
		if err != nil {
			return err
		}
		files[p] = fi
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fake hub: indexing files: %w", err)
	}
	sort.Strings(paths)
	sort.Strings(dirs)
	h.mu.Lock()
	h.files, h.paths, h.dirs = files, paths, dirs
	h.mu.Unlock()
	return nil
}

func digest(fsys fs.FS, p string) (fileInfo, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return fileInfo{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, err
	}
	s256, s1 := sha256.New(), sha1.New()
	fmt.Fprintf(s1, "blob %d\x00", st.Size())
	n, err := io.Copy(io.MultiWriter(s256, s1), f)
	if err != nil {
		return fileInfo{}, err
	}
	if n != st.Size() {
		return fileInfo{}, fmt.Errorf("%s changed while it was read", p)
	}
	return fileInfo{size: n, sha256: hex.EncodeToString(s256.Sum(nil)), sha1: hex.EncodeToString(s1.Sum(nil))}, nil
}

// GitBlobSHA1 returns git's object id of a blob with the given content:
// sha1("blob <len>\x00" + content), hex.
func GitBlobSHA1(content []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(content))
	s.Write(content)
	return hex.EncodeToString(s.Sum(nil))
}

// Start serves the hub and its CDN on two httptest servers (TLS with h2 when
// Options.TLS); Close stops them.
func (h *Hub) Start() {
	h.cdnSrv = h.newServer(h.CDNHandler(), &h.cdnConns)
	h.SetCDNBase(h.cdnSrv.URL)
	h.hubSrv = h.newServer(h.Handler(), &h.hubConns)
}

func (h *Hub) newServer(handler http.Handler, conns *atomic.Int64) *httptest.Server {
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	if h.opt.TLS {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	return srv
}

// Client returns a client that trusts the servers Start started (with Options.TLS, their
// certificate; it negotiates h2 where offered, as a browser would).
func (h *Hub) Client() *http.Client { return h.hubSrv.Client() }

// CertPool returns the certificate pool that trusts the servers Start started over TLS
// (httptest's certificate, the same for both), or nil without TLS.
func (h *Hub) CertPool() *x509.CertPool {
	if !h.opt.TLS {
		return nil
	}
	pool := x509.NewCertPool()
	pool.AddCert(h.hubSrv.Certificate())
	return pool
}

// Connections returns the TCP connections the hub and the CDN accepted so far.
func (h *Hub) Connections() (hub, cdn int64) { return h.hubConns.Load(), h.cdnConns.Load() }

// RateLimit makes the next n resolve requests answer 429 with Retry-After: 1 and the
// hub's RateLimit ("resolvers";r=0;t=1) and RateLimit-Policy headers.
func (h *Hub) RateLimit(n int) { h.rateLimited.Store(int64(n)) }

// Expired returns how many CDN requests were refused for an expired signed URL.
func (h *Hub) Expired() int64 { return h.expired.Load() }

// Close stops the servers Start started.
func (h *Hub) Close() {
	if h.hubSrv != nil {
		h.hubSrv.Close()
	}
	if h.cdnSrv != nil {
		h.cdnSrv.Close()
	}
}

// URL returns the hub's base URL (after Start).
func (h *Hub) URL() string { return h.hubSrv.URL }

// CDNURL returns the CDN's base URL as redirects name it.
func (h *Hub) CDNURL() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cdnBase
}

// SetCDNBase sets the base URL redirects point at, e.g. "http://127.0.0.1:PORT"; with
// Options.CDNHost set, the host name is replaced by it (the port kept).
func (h *Hub) SetCDNBase(base string) {
	if h.opt.CDNHost != "" {
		if u, err := url.Parse(base); err == nil {
			u.Host = h.opt.CDNHost + ":" + u.Port()
			base = u.String()
		}
	}
	h.mu.Lock()
	h.cdnBase = strings.TrimRight(base, "/")
	h.mu.Unlock()
}

// Commit returns the repository's commit.
func (h *Hub) Commit() string { return h.opt.Commit }

// BytesServed returns the file bytes served so far (hub and CDN together).
func (h *Hub) BytesServed() int64 { return h.bytesServed.Load() }

// FileRequests returns the number of file (resolve and CDN) requests answered so far.
func (h *Hub) FileRequests() int64 { return h.fileRequests.Load() }

// APIRequests returns the number of API (revision and tree) requests answered so far.
func (h *Hub) APIRequests() int64 { return h.apiRequests.Load() }

// TreePages returns the number of tree-listing pages served so far.
func (h *Hub) TreePages() int64 { return h.treePages.Load() }

// ResetCounters zeroes the counters and the record of Authorization headers.
func (h *Hub) ResetCounters() {
	h.bytesServed.Store(0)
	h.fileRequests.Store(0)
	h.apiRequests.Store(0)
	h.treePages.Store(0)
	h.mu.Lock()
	h.authSeen = nil
	h.mu.Unlock()
}

// CDNAuthorizations returns the Authorization headers the CDN received (it should
// receive none).
func (h *Hub) CDNAuthorizations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.authSeen...)
}

// Handler returns the hub's handler: /api/models/{repo}/revision/{rev},
// /api/models/{repo}/tree/{rev}, and /{repo}/resolve/{rev}/{path}.
func (h *Hub) Handler() http.Handler {
	return http.HandlerFunc(h.serveHub)
}

// CDNHandler returns the CDN's handler: /cdn/{sha256} serves the file with that digest.
func (h *Hub) CDNHandler() http.Handler {
	return http.HandlerFunc(h.serveCDN)
}
