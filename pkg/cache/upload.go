package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/fetch"
)

// uploadRetries bounds the chunk retries without progress.
const uploadRetries = 4

// pushFile uploads the file at path as the blob d, streamed from disk in chunks (PATCH
// with Content-Range). A chunk that fails is resumed from what the registry reports it
// holds (GET on the upload's location); an upload the registry forgot starts over. With
// Options.UploadDir, where each upload stands is kept there after every chunk, and a later
// run (after a kill) continues it.
func (r *Registry) pushFile(ctx context.Context, path string, d digest.Digest, size int64) error {
	f, err := openSized(path, size)
	if err != nil {
		return err
	}
	defer f.Close()
	loc, off, err := r.resumeOrStart(ctx, d, size)
	if err != nil {
		return err
	}
	if loc, err = r.sendChunks(ctx, d, f, loc, off, size); err != nil {
		return err
	}
	if err := r.completeUpload(ctx, loc, d); err != nil {
		return err
	}
	r.forgetUpload(d)
	return nil
}

// openSized opens the file at path, which must be size bytes.
func openSized(path string, size int64) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening: %w", err)
	}
	if fi.Size() != size {
		f.Close()
		return nil, fmt.Errorf("%s is %d bytes, want %d", path, fi.Size(), size)
	}
	return f, nil
}

// resumeOrStart returns the location of the upload of blob d and the offset it goes on
// from: an upload an earlier run left half done continues where the registry has it, else
// a new one starts at 0.
func (r *Registry) resumeOrStart(ctx context.Context, d digest.Digest, size int64) (string, int64, error) {
	if loc := r.savedUpload(d); loc != "" {
		have, nloc, serr := r.uploadStatus(ctx, loc)
		if serr == nil && have <= size {
			r.logf("resuming the upload of %s at byte %d", d, have)
			return nloc, have, nil
		}
	}
	loc, err := r.startUpload(ctx)
	return loc, 0, err
}

// sendChunks sends f from off to size in chunks, recording where the upload stands after
// each. A chunk that fails is retried from what the registry holds, after a doubling
// wait, uploadRetries times without progress; an upload the registry lost starts over.
// It returns the upload's location after the last chunk.
func (r *Registry) sendChunks(ctx context.Context, d digest.Digest, f *os.File, loc string, off, size int64) (string, error) {
	failures := 0
	wait := 500 * time.Millisecond
	for off < size {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n := min(r.chunkSize, size-off)
		next, perr := r.patchWhole(ctx, loc, f, off, n)
		if perr == nil {
			loc, off, failures = next, off+n, 0
			r.saveUpload(d, loc)
			continue
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		failures++
		if failures > uploadRetries {
			return "", fmt.Errorf("uploading at byte %d: %w", off, perr)
		}
		r.logf("upload of %s failed at byte %d (%v); resuming", d, off, perr)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
		have, nloc, serr := r.uploadStatus(ctx, loc)
		if serr != nil {
			// The registry lost the upload: start it again.
			var err error
			if loc, err = r.startUpload(ctx); err != nil {
				return "", err
			}
			off = 0
			continue
		}
		loc, off = nloc, have
	}
	return loc, nil
}

// completeUpload ends the upload at loc, naming its digest d (PUT ?digest=).
func (r *Registry) completeUpload(ctx context.Context, loc string, d digest.Digest) error {
	u, err := url.Parse(loc)
	if err != nil {
		return fmt.Errorf("upload location %q: %w", redactLoc(loc), err)
	}
	q := u.Query()
	q.Set("digest", d.String())
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), nil)
	if err != nil {
		return err
	}
	req.ContentLength = 0
	resp, err := r.auth.Do(req)
	if err != nil {
		return fmt.Errorf("completing the upload: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("completing the upload: %w", statusError(resp))
	}
	return nil
}

// uploadRecord is where an unfinished upload stands, kept in Options.UploadDir.
type uploadRecord struct {
	Repository string `json:"repository"`
	Location   string `json:"location"`
}

// savedUpload returns the location of an upload of blob d that an earlier run left
// unfinished ("" when there is none, or no UploadDir).
func (r *Registry) savedUpload(d digest.Digest) string {
	if r.uploadDir == "" {
		return ""
	}
	b, err := os.ReadFile(r.uploadFile(d))
	if err != nil {
		return ""
	}
	var rec uploadRecord
	if json.Unmarshal(b, &rec) != nil || rec.Repository != r.cfg.Repository {
		return ""
	}
	return rec.Location
}

// saveUpload records where the upload of blob d stands, so that a killed run resumes it.
// The location is a handle on that one upload, not a credential; the file is 0600.
func (r *Registry) saveUpload(d digest.Digest, loc string) {
	if r.uploadDir == "" {
		return
	}
	b, err := json.Marshal(uploadRecord{Repository: r.cfg.Repository, Location: loc})
	if err != nil || os.MkdirAll(r.uploadDir, 0o700) != nil {
		return
	}
	_ = atomicfile.Write(r.uploadFile(d), b, 0o600)
}

// forgetUpload drops the record of a finished upload.
func (r *Registry) forgetUpload(d digest.Digest) {
	if r.uploadDir != "" {
		_ = os.Remove(r.uploadFile(d))
	}
}

// uploadFile is the file in UploadDir that records the upload of blob d.
func (r *Registry) uploadFile(d digest.Digest) string {
	return filepath.Join(r.uploadDir, d.Encoded()+".json")
}

// startUpload opens an upload session and returns its location.
func (r *Registry) startUpload(ctx context.Context) (_ string, err error) {
	ctx, done, err := r.bounded(ctx)
	if err != nil {
		return "", err
	}
	defer func() { err = done(err) }()
	u := r.base + "/v2/" + r.path + "/blobs/uploads/"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := r.auth.Do(req)
	if err != nil {
		return "", fmt.Errorf("starting an upload: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("starting an upload: %w", statusError(resp))
	}
	return location(resp)
}

// patchWhole is patch, carried to its end when ctx is cancelled in the middle (for at
// most the registry's timeout more): distribution takes an upload's continuation only at
// the offset its last answer named, and refuses (and cancels) an upload that holds part of
// a chunk more, so a push stopped by SIGINT or SIGTERM mid-chunk would lose all it sent.
func (r *Registry) patchWhole(ctx context.Context, loc string, f *os.File, off, n int64) (string, error) {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.timeout, cancel)
		context.AfterFunc(pctx, func() { t.Stop() })
	})
	defer stop()
	return r.patch(pctx, loc, f, off, n)
}

// patch sends bytes [off, off+n) of f to the upload at loc and returns its next location.
// A registry that takes no byte of the chunk for the registry's timeout (its storage hangs,
// and the write would block for ever) fails it.
//
// The body is a chunkBody: over plain HTTP the transport hands the file to sendfile(2),
// and the chunk goes from the page cache to the socket with no copy through this process
// (over TLS it is read 32 KiB at a time, as any body). What the registry has taken is the
// body's file offset, which both ways advance; a watchdog reads it, since sendfile calls
// no Read.
func (r *Registry) patch(ctx context.Context, loc string, f *os.File, off, n int64) (_ string, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stalled := fmt.Errorf("the registry took no byte of the chunk for %s", r.timeout)
	defer func() {
		if err != nil && context.Cause(ctx) == stalled {
			err = stalled
		}
	}()
	bodies := &chunkBodies{src: f, off: off, end: off + n}
	defer bodies.closeAll()
	first, err := bodies.open()
	if err != nil {
		return "", err
	}
	stopWatch := r.watchChunk(bodies, func() { cancel(stalled) })
	defer stopWatch()
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, loc, first)
	if err != nil {
		return "", err
	}
	req.GetBody = func() (io.ReadCloser, error) { return bodies.open() }
	req.ContentLength = n
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Range", fmt.Sprintf("%d-%d", off, off+n-1))
	resp, err := r.auth.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return "", statusError(resp)
	}
	return location(resp)
}

// watchChunk calls stalled once the chunk's latest body has not moved for the registry's
// timeout while bytes of it are left; a chunk sent whole is no longer watched (the
// transport's response header timeout applies then). It returns the function that stops
// the watch.
func (r *Registry) watchChunk(bodies *chunkBodies, stalled func()) (stop func()) {
	done := make(chan struct{})
	tick := max(r.timeout/8, 10*time.Millisecond)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		last, since := int64(-1), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				pos, ok := bodies.position()
				switch {
				case ok && pos >= bodies.end:
					return
				case !ok || pos != last:
					last, since = pos, now
				case now.Sub(since) >= r.timeout:
					stalled()
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// chunkBodies opens the bodies of one chunk: the first, and one for each time the
// transport sends the request again (GetBody). Each has a file descriptor of its own on
// the same file, so that no two share an offset; all are closed when the chunk is done.
type chunkBodies struct {
	src      *os.File
	off, end int64

	mu     sync.Mutex
	opened []*os.File
}

// open returns a new body positioned at the chunk's start.
func (c *chunkBodies) open() (io.ReadCloser, error) {
	f, err := os.Open(c.src.Name())
	if err != nil {
		return nil, fmt.Errorf("opening the chunk's file again: %w", err)
	}
	a, aerr := c.src.Stat()
	b, berr := f.Stat()
	if aerr != nil || berr != nil || !os.SameFile(a, b) {
		f.Close()
		return nil, fmt.Errorf("%s was replaced while it was pushed", c.src.Name())
	}
	if _, err := f.Seek(c.off, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seeking to byte %d of %s: %w", c.off, c.src.Name(), err)
	}
	c.mu.Lock()
	c.opened = append(c.opened, f)
	c.mu.Unlock()
	return &chunkBody{f: f, end: c.end}, nil
}

// position is the offset of the latest body's file (false before there is one).
func (c *chunkBodies) position() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.opened) == 0 {
		return 0, false
	}
	pos, err := c.opened[len(c.opened)-1].Seek(0, io.SeekCurrent)
	return pos, err == nil
}

func (c *chunkBodies) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.opened {
		f.Close()
	}
	c.opened = nil
}

// chunkBody reads a file from its offset up to end. It is a syscall.Conn, so that
// net.TCPConn.ReadFrom, given it under the transport's io.LimitedReader of the chunk's
// length, sends it with sendfile(2) from the same offset. Close leaves the descriptor to
// chunkBodies (the watchdog reads its offset until the chunk is done).
type chunkBody struct {
	f   *os.File
	end int64
}

func (c *chunkBody) Read(p []byte) (int, error) {
	pos, err := c.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	left := c.end - pos
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	return c.f.Read(p)
}

// SyscallConn is the file's, for sendfile.
func (c *chunkBody) SyscallConn() (syscall.RawConn, error) { return c.f.SyscallConn() }

// Close does nothing: chunkBodies closes the descriptor.
func (c *chunkBody) Close() error { return nil }

// uploadStatus asks how many bytes the upload at loc holds.
func (r *Registry) uploadStatus(ctx context.Context, loc string) (_ int64, _ string, err error) {
	ctx, done, err := r.bounded(ctx)
	if err != nil {
		return 0, "", err
	}
	defer func() { err = done(err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := r.auth.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return 0, "", statusError(resp)
	}
	next, err := location(resp)
	if err != nil {
		next = loc
	}
	// Range: 0-END, END the last byte held (0-0 also when nothing is: start over then,
	// the registry refuses a chunk that does not continue what it holds).
	rng := strings.TrimPrefix(resp.Header.Get("Range"), "bytes=")
	_, end, ok := strings.Cut(rng, "-")
	e, perr := strconv.ParseInt(end, 10, 64)
	if !ok || perr != nil || e <= 0 {
		return 0, "", fmt.Errorf("upload status: Range %q", rng)
	}
	return e + 1, next, nil
}

// location resolves a response's Location against its request.
func location(resp *http.Response) (string, error) {
	u, err := resp.Location()
	if err != nil {
		return "", fmt.Errorf("the registry sent no upload location: %w", err)
	}
	return u.String(), nil
}

// httpError is an unexpected response: its status and the start of its body.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

// statusError describes an unexpected response with the start of its body.
func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	s := strings.TrimSpace(string(b))
	if s != "" {
		s = ": " + s
	}
	return &httpError{code: resp.StatusCode, msg: resp.Status + s}
}

// redactLoc drops the query of an upload location (it may carry a state token).
func redactLoc(loc string) string {
	if i := strings.IndexByte(loc, '?'); i >= 0 {
		return loc[:i]
	}
	return loc
}

// pushBlobs uploads, in parallel, every file the registry lacks and returns the layers'
// descriptors in the files' order. At most as many blobs are sent at once as a pull
// fetches files at once (Options.Fetch.Files, pkg/fetch's default of 4): an upload
// session takes its chunks one after another, so files, not ranges, are what a push can
// spread over connections. The first failure stops the others (a chunk in flight is sent
// whole, as on SIGINT, so their uploads resume on the next push).
func (r *Registry) pushBlobs(ctx context.Context, files []File) ([]ocispec.Descriptor, error) {
	layers := make([]ocispec.Descriptor, 0, len(files))
	for _, f := range files {
		d := digest.NewDigestFromEncoded(digest.SHA256, f.SHA256)
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("pushing %s: digest %q: %w", f.Name, f.SHA256, err)
		}
		desc := ocispec.Descriptor{MediaType: mediaTypeFile, Digest: d, Size: f.Size,
			Annotations: map[string]string{ocispec.AnnotationTitle: f.Name}}
		if f.Mode != 0 {
			desc.Annotations[annotationMode] = fmt.Sprintf("%04o", f.Mode.Perm())
		}
		layers = append(layers, desc)
	}
	workers := r.fetchOpt.Files
	if workers <= 0 {
		workers = pushFiles
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		sending = map[digest.Digest]bool{}
	)
	sem := make(chan struct{}, workers)
	for i, f := range files {
		d := layers[i].Digest
		// The same bytes under two names are one blob, sent once.
		if sending[d] {
			continue
		}
		sending[d] = true
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.pushOne(ctx, f, layers[i]); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return layers, nil
}

// pushFiles is how many blobs a push sends at once by default: pkg/fetch's default of
// files fetched at once.
const pushFiles = 4

// pushOne uploads one file as the blob desc, unless the registry holds it.
func (r *Registry) pushOne(ctx context.Context, f File, desc ocispec.Descriptor) error {
	ok, err := r.exists(ctx, desc)
	if err != nil {
		return fmt.Errorf("pushing %s: %w", f.Name, err)
	}
	if ok {
		return nil
	}
	start := time.Now()
	if err := r.pushFile(ctx, f.Path, desc.Digest, f.Size); err != nil {
		return fmt.Errorf("pushing %s: %w", f.Name, r.hint(err))
	}
	r.logf("pushed %s (%s) to %s in %s", f.Name, fetch.FormatBytes(f.Size), r, time.Since(start).Round(time.Millisecond))
	return nil
}
