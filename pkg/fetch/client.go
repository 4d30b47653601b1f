// The downloader's HTTP client: Options with defaults applied, an HTTP/1.1-only transport,
// and redirects that carry the token only to its own host.

package fetch

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sglprov/sglprov/pkg/httpwait"
)

// config is Options with defaults applied.
type config struct {
	Options
	client *http.Client
	// dnsSaid is set once DNSError was called.
	dnsSaid atomic.Bool
}

// newConfig applies the defaults to opt and makes the client.
func newConfig(opt Options) (*config, error) {
	c := &config{Options: opt}
	if c.Dest == "" {
		return nil, errors.New("fetch: no destination folder")
	}
	if c.Files <= 0 {
		c.Files = defaultFiles
	}
	if c.Conns <= 0 {
		c.Conns = defaultConns
	}
	if c.MinChunk <= 0 {
		c.MinChunk = defaultMinChunk
	}
	if c.ChunkSize <= 0 {
		c.ChunkSize = defaultChunkSize
	}
	if c.ChunkSize < pieceSize {
		c.ChunkSize = pieceSize
	}
	if c.MaxBuffer <= 0 {
		c.MaxBuffer = defaultMaxBuffer
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = defaultStall
	}
	// A negative Retries turns retries off (a transient failure fails the file at once);
	// it is kept negative so that fetchRangeTo sees it.
	if c.Retries == 0 {
		c.Retries = defaultRetries
	}
	if c.RetryWait <= 0 {
		c.RetryWait = defaultRetryWait
	}
	if c.NoProgress <= 0 {
		c.NoProgress = defaultNoProgress
	}
	if c.CheckpointBytes <= 0 {
		c.CheckpointBytes = defaultCheckpoint
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = defaultCkEvery
	}
	if c.FreeSpace == nil {
		c.FreeSpace = statfsFree
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Progress == nil {
		c.Progress = nopReporter{}
	}
	c.client = c.newClient(opt.Client)
	return c, nil
}

// newClient returns the client the downloader asks with: a copy of client (or one on the
// downloader's transport) whose redirects are checked and carry the token only to its
// own host.
func (c *config) newClient(client *http.Client) *http.Client {
	var base http.Client
	if client != nil {
		base = *client
	} else {
		base = http.Client{Transport: newTransport(c.Files * c.Conns)}
	}
	orig := base.CheckRedirect
	base.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := httpwait.CheckRedirect(req, via); err != nil {
			return err
		}
		if orig != nil {
			if err := orig(req, via); err != nil {
				return err
			}
		}
		// net/http copies the first request's headers to every hop; it drops
		// Authorization only by a host-name heuristic that ignores ports. Decide here,
		// per hop, by exact host:port.
		req.Header.Del("Authorization")
		c.authorize(req)
		return nil
	}
	return &base
}

// newTransport returns the downloader's transport. It speaks HTTP/1.1 only, also over TLS
// to a server that offers h2: HTTP/2 would carry every range of every file as streams of
// one TCP connection, so that a per-connection cap (a CDN edge's) capped the whole download
// and one stalled connection stalled everything; over HTTP/1.1 each range has its own.
func newTransport(conns int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	HTTP1Only(t)
	t.MaxIdleConnsPerHost = conns + 4
	t.MaxIdleConns = 4 * (conns + 4)
	t.DisableCompression = true
	t.ReadBufferSize = 64 << 10
	t.ResponseHeaderTimeout = 0 // the stall timer covers it
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// HTTP1Only makes t speak HTTP/1.1 alone, also over TLS to a server that offers h2, so
// that each request (each range) has a TCP connection of its own. Other clients that run
// parallel ranges (the fleet cache's) use it too.
func HTTP1Only(t *http.Transport) {
	t.ForceAttemptHTTP2 = false
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	// A cloned transport has h2 set up: its TLS config offers "h2" by ALPN, which a server
	// then picks and speaks to a client that reads HTTP/1.1. Offer http/1.1 alone.
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if t.TLSClientConfig == nil {
		t.TLSClientConfig = &tls.Config{}
	} else {
		t.TLSClientConfig = t.TLSClientConfig.Clone()
	}
	t.TLSClientConfig.NextProtos = []string{"http/1.1"}
}

// authorize adds the bearer token when req goes to the token's host.
func (c *config) authorize(req *http.Request) {
	if c.Token == "" || c.TokenHost == "" {
		return
	}
	if canonicalHost(req.URL.Scheme, req.URL.Host) == canonicalHost(req.URL.Scheme, c.TokenHost) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

// canonicalHost returns host:port in lower case, with the scheme's default port added.
func canonicalHost(scheme, host string) string {
	host = strings.ToLower(host)
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "443"
	if scheme == "http" {
		port = "80"
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}
