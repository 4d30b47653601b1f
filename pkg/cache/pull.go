package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"

	"github.com/sglprov/sglprov/pkg/fetch"
)

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
	if a.Files, err = layerFiles(got, m.Layers); err != nil {
		return nil, err
	}
	return a, nil
}

// layerFiles returns the files the layers of the manifest got name: each a sha256 blob
// of a known size, titled, with the mode its annotation gives (bounded by BoundMode).
func layerFiles(got digest.Digest, layers []ocispec.Descriptor) ([]File, error) {
	var files []File
	for i, l := range layers {
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
		files = append(files, f)
	}
	return files, nil
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
