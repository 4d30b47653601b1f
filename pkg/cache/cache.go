// Package cache is the fleet cache: an OCI registry repository that holds, per step
// fingerprint, one artifact (a manifest tagged with the fingerprint, whose layers are the
// step's files and whose config is the step's own record), and the files themselves as
// blobs whose digest is their sha256. A node that builds or downloads something pushes it;
// the others pull it instead of building, and fetch weights from the registry with the
// project's parallel ranged downloader (pkg/fetch), falling back to the origin per file.
//
// Credentials come from the docker config (DOCKER_CONFIG/config.json, else
// ~/.docker/config.json, with its credential helpers), and the registry's bearer token flow
// is followed (oras-go's auth client). Credentials never appear in a log line or an error.
package cache

import (
	"context"
	"net/http"
	"os"
	"time"
)

// Kinds of artifacts (the manifest's artifactType).
const (
	// KindBuild is a build step's outputs.
	KindBuild = "application/vnd.sglprov.build.v1"
	// KindDownload is a download step's resolved listing, with the files as layers.
	KindDownload = "application/vnd.sglprov.download.v1"
)

// ChunkSize is the range size for downloading blobs from a registry: a registry spends
// more on each request (it resolves the blob's link in its storage) than a static file
// server, so ranges are larger than pkg/fetch's default. Measured in docs/benchmarks.md.
const ChunkSize = 16 << 20

// DefaultMinRate is the minimum rate of a blob's answer when cache.min_rate is not set:
// 64 KiB/s per connection over 30 s (fetch.DefaultMinRateWindow). A registry slower than
// that (a trickle that never stalls) is given up for the run and the origin takes over.
const DefaultMinRate = 64 << 10

// DefaultStallTimeout is the stall timeout of a pull whose fetch options set none (as
// pkg/fetch's default).
const DefaultStallTimeout = 60 * time.Second

// Cache is the fleet cache as the steps and the engine use it.
type Cache interface {
	// Lookup returns the artifact tagged tag (a step fingerprint), or nil when there is
	// none. An artifact not in the pin list (Config.Digests) is an error.
	Lookup(ctx context.Context, tag string) (*Artifact, error)
	// Pull downloads every file of a into dir, under its name, checking size and sha256.
	Pull(ctx context.Context, a *Artifact, dir string) error
	// Push publishes files (each read from File.Path) as one artifact of kind tagged tag,
	// with meta (JSON) as its config; blobs the registry already has are not sent again.
	Push(ctx context.Context, tag, kind string, meta []byte, files []File) (*Artifact, error)
	// HasBlob reports whether the registry holds the blob with this sha256 (hex).
	HasBlob(ctx context.Context, sha256 string) (bool, error)
	// BlobURL is the URL of the blob with this sha256 (hex), to fetch with HTTPClient.
	BlobURL(sha256 string) string
	// HTTPClient is a client that authenticates to the registry (for pkg/fetch).
	HTTPClient() *http.Client
	// GaveUp returns why the cache is not asked again in this run (it did not answer, or
	// a blob stalled or trickled; the error wraps ErrNotAskedAgain), or nil while it is asked.
	GaveUp() error
	// MinRate is the fewest bytes per second a blob's answer may bring (fetch.Options'
	// MinRate for pulls from the cache; 0: no minimum).
	MinRate() int64
	// CanPush reports whether this node publishes (cache.push).
	CanPush() bool
	// String names the repository, for logs.
	String() string
}

// Tagger is a Cache that can give an artifact it holds a second tag (the registry).
type Tagger interface {
	// Tag tags the artifact whose manifest has digest (sha256:<hex>) with tag too; the
	// artifact is not sent again.
	Tag(ctx context.Context, digest, tag string) error
}

// Config is a rendered cache block.
type Config struct {
	// Repository is "host[:port]/path".
	Repository string
	// Push: this node publishes what it builds and downloads.
	Push bool
	// PlainHTTP speaks HTTP to the registry; loopback hosts always may.
	PlainHTTP bool
	// Digests, when not empty, is the only manifest digests Lookup accepts.
	Digests []string
	// MinRate is the fewest bytes per second a blob's answer may bring over 30 s before
	// the registry is given up for the run (0: DefaultMinRate; negative: no minimum).
	MinRate int64
}

// Artifact is one step's artifact in the registry.
type Artifact struct {
	// Digest is the manifest's digest, "sha256:<hex>"; Tag the tag it was found under.
	Digest, Tag string
	// Kind is the artifact type (KindBuild, KindDownload).
	Kind string
	// Meta is the config blob: the step's own record, JSON.
	Meta []byte
	// Files are the layers.
	Files []File
}

// File is one file of an artifact.
type File struct {
	// Name is the file's name in the artifact (a relative slash path, or an absolute
	// host path for outputs outside a build's folder).
	Name string
	// Path is where the file is on this machine (Push reads it); empty in a pulled
	// artifact.
	Path string
	// Size in bytes, and SHA256 as lower-case hex.
	Size   int64
	SHA256 string
	// Mode is the file's permission bits (0 when unknown).
	Mode os.FileMode
}
