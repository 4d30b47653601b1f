package fetch

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/httpwait"
	"github.com/sglprov/sglprov/pkg/redact"
)

const (
	defaultFiles      = 4
	defaultConns      = 8
	defaultMinChunk   = 64 << 20
	defaultChunkSize  = 2 << 20
	defaultMaxBuffer  = 48 << 20
	defaultStall      = 60 * time.Second
	defaultRetries    = 3
	defaultNoProgress = 10 * time.Minute
	defaultRetryWait  = time.Second
	maxRetryWait      = 10 * time.Second
	defaultCheckpoint = 256 << 20
	defaultCkEvery    = 10 * time.Second
	// pieceSize is the unit bytes are read from the network in, written and hashed.
	pieceSize = 256 << 10
	// frontierReserve is how many pieces the connection at a file's hashed frontier may
	// hold beyond MaxBuffer, so that the frontier always moves.
	frontierReserve = 4
)

// errRangeIgnored is returned when a server answered 200 to a Range request.
var errRangeIgnored = errors.New("server ignored the Range header (answered 200 to a range request)")

// errWholeFile is returned when the server refused the first range of a file of unknown
// size (416, as for an empty file): the file is then asked for whole, on one connection.
var errWholeFile = errors.New("server refused the first range (416); asking for the whole file")

// errStartOver is returned when the server refuses the range of a resumed part (416).
var errStartOver = errors.New("server refused the resumed range (416)")

// config is Options with defaults applied.
type config struct {
	Options
	client *http.Client
}

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
	var base http.Client
	if opt.Client != nil {
		base = *opt.Client
	} else {
		base = http.Client{Transport: newTransport(c.Files * c.Conns)}
	}
	orig := base.CheckRedirect
	base.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
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
	c.client = &base
	return c, nil
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

func statfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("checking free space in %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// safeJoin joins a relative, clean path to dest, refusing absolute paths and "..".
func safeJoin(dest, rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.Contains(rel, "\\") {
		return "", fmt.Errorf("unsafe file path %q", rel)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." || part == "" || part == "." {
			return "", fmt.Errorf("unsafe file path %q", rel)
		}
	}
	if first, _, _ := strings.Cut(rel, "/"); first == WorkDir {
		return "", fmt.Errorf("file path %q is inside %s/, the folder that holds the part files; no listed file may be there", rel, WorkDir)
	}
	return filepath.Join(dest, filepath.FromSlash(rel)), nil
}

// partPaths returns the part file and the resume record of the file at rel (relative to
// dest, already checked by safeJoin). They live under dest/.sglprov/parts, where no listed
// file can be (safeJoin refuses that folder), and their names end in ".part" and
// ".part.json" so that the part of one file is never the record of another.
func partPaths(dest, rel string) (part, side string) {
	base := filepath.Join(dest, WorkDir, partsDir, filepath.FromSlash(rel))
	return base + partSuffix, base + sideSuffix
}

// job is one file of a Fetch call.
type job struct {
	c      *config
	pool   *pool
	f      File
	final  string
	part   string
	side   string
	result Result
	// noRanges is set once the server ignored a Range header: the file is then always
	// downloaded from 0 on one connection.
	noRanges bool
	net      atomic.Int64
	// lastByte is when the file last received a byte (unix nanoseconds), or when its
	// download began: the retry budget (NoProgress) counts from it.
	lastByte atomic.Int64
	// target is where the file's URL last redirected to, or nil.
	target atomic.Pointer[string]
}

func fetch(ctx context.Context, files []File, opt Options) ([]Result, error) {
	c, err := newConfig(opt)
	if err != nil {
		return nil, err
	}
	jobs := make([]*job, len(files))
	seen := map[string]bool{}
	for i, f := range files {
		p, err := safeJoin(c.Dest, f.Path)
		if err != nil {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		if seen[p] {
			return nil, fmt.Errorf("fetch: file %q listed twice", f.Path)
		}
		seen[p] = true
		if f.SHA256 == "" && f.GitSHA1 == "" {
			return nil, fmt.Errorf("fetch: file %q has no sha256 or git sha1", f.Path)
		}
		f.SHA256 = strings.ToLower(f.SHA256)
		f.GitSHA1 = strings.ToLower(f.GitSHA1)
		part, side := partPaths(c.Dest, f.Path)
		jobs[i] = &job{c: c, f: f, final: p, part: part, side: side,
			result: Result{Path: f.Path, Size: f.Size, SHA256: f.SHA256}}
	}

	// What is there already, and how much is left (nothing is written yet).
	var need uint64
	for _, j := range jobs {
		present, err := j.present()
		if err != nil {
			return nil, err
		}
		if present {
			j.result.Present = true
			continue
		}
		if j.f.Size < 0 {
			continue
		}
		left := j.f.Size
		if st, err := os.Stat(j.part); err == nil && st.Size() <= j.f.Size && j.f.SHA256 != "" {
			left -= st.Size()
		}
		need += uint64(left)
	}
	if need > 0 {
		dir := existingAncestor(c.Dest)
		free, err := c.FreeSpace(dir)
		if err != nil {
			return nil, fmt.Errorf("checking free space: %w", err)
		}
		if free < need {
			return nil, &SpaceError{Dir: dir, Need: need, Free: free}
		}
	}

	p := newPool(c.MaxBuffer)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, c.Files)
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		if j.result.Present {
			continue
		}
		j.pool = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			start := time.Now()
			j.lastByte.Store(start.UnixNano())
			err := j.run(ctx)
			j.result.Duration = time.Since(start)
			j.result.Bytes = j.net.Load()
			// A failed file fails alone: the others go on, unless the disk is full,
			// which no other file can get past either.
			errs[i] = err
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
				cancel()
			}
		}()
	}
	wg.Wait()

	var results []Result
	var failed []error
	var first error
	for i, j := range jobs {
		if errs[i] == nil {
			results = append(results, j.result)
			continue
		}
		failed = append(failed, errs[i])
		if first == nil || (errors.Is(first, context.Canceled) && !errors.Is(errs[i], context.Canceled)) {
			first = errs[i]
		}
	}
	if ctx.Err() != nil && first != nil {
		// Cancelled by the caller: that is the cause, whatever each file said.
		return results, first
	}
	if len(failed) > 0 {
		return results, &FilesError{Failed: failed, Total: len(jobs)}
	}
	// Every file is in place: the part folders are empty unless another file's part is
	// still there; remove the empty ones.
	work := filepath.Join(c.Dest, WorkDir)
	for _, j := range jobs {
		for d := filepath.Dir(j.part); strings.HasPrefix(d, work) && os.Remove(d) == nil; d = filepath.Dir(d) {
		}
	}
	return results, nil
}

// existingAncestor returns dir or its nearest existing parent.
func existingAncestor(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// present reports whether the final file is already there with the expected size (or,
// when the size is unknown, with the expected digest).
func (j *job) present() (bool, error) {
	st, err := os.Stat(j.final)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", j.final, err)
	}
	if !st.Mode().IsRegular() {
		return false, fmt.Errorf("%s exists and is not a regular file", j.final)
	}
	if j.f.Size >= 0 {
		if st.Size() == j.f.Size {
			return true, nil
		}
		return false, nil
	}
	if verifyFile(j.final, j.f) == nil {
		j.result.Size = st.Size()
		return true, nil
	}
	return false, nil
}

// run downloads the file, retrying the whole file after a size or digest mismatch.
func (j *job) run(ctx context.Context) error {
	rep := j.c.Progress
	var err error
	restarts := 0
	for attempt := 0; ; attempt++ {
		err = j.attempt(ctx, attempt == 0)
		var mm *MismatchError
		switch {
		case err == nil:
		case errors.Is(err, errRangeIgnored) || errors.Is(err, errStartOver) || errors.Is(err, errWholeFile):
			restarts++
			if restarts <= max(j.c.Retries, 0)+1 {
				j.noRanges = j.noRanges || errors.Is(err, errRangeIgnored) || errors.Is(err, errWholeFile)
				j.c.Logf("%s: %v; starting over from byte 0", j.f.Path, err)
				j.removePart()
				attempt--
				continue
			}
		case errors.As(err, &mm) && attempt < j.c.Retries:
			j.c.Logf("%s: %v; deleting the part and downloading again", j.f.Path, err)
			j.removePart()
			if !sleepCtx(ctx, j.c.RetryWait) {
				err = ctx.Err()
				break
			}
			continue
		}
		break
	}
	if err != nil {
		var mm *MismatchError
		var tl *TooLongError
		if errors.As(err, &mm) {
			j.removePart()
		} else if errors.As(err, &tl) {
			j.dropTooLong()
		}
		// A cancellation is said as such; any other error is the cause and stays.
		if ctx.Err() != nil && !errors.As(err, &mm) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			err = fmt.Errorf("downloading %s: %w", j.f.Path, ctx.Err())
		}
	}
	rep.Done(j.f.Path, err)
	return err
}

func (j *job) removePart() {
	_ = os.Remove(j.part)
	_ = os.Remove(j.side)
	_ = os.Remove(j.side + ".tmp")
}

// hashers computes the digests of a file in order.
type hashers struct {
	sha256 hash.Hash
	git    hash.Hash // nil unless needed
}

func (j *job) newHashers(size int64) *hashers {
	h := &hashers{sha256: sha256.New()}
	if j.f.SHA256 == "" && j.f.GitSHA1 != "" && size >= 0 {
		h.git = sha1.New()
		fmt.Fprintf(h.git, "blob %d\x00", size)
	}
	return h
}

func (h *hashers) Write(p []byte) (int, error) {
	h.sha256.Write(p)
	if h.git != nil {
		h.git.Write(p)
	}
	return len(p), nil
}

// attempt makes one attempt at the whole file: it opens (or resumes) the part file, runs
// the connections and the in-order writer, and renames the part when it is complete and
// matches.
func (j *job) attempt(ctx context.Context, first bool) error {
	if err := os.MkdirAll(filepath.Dir(j.part), 0o755); err != nil {
		return fmt.Errorf("creating folder for the part file of %s: %w", j.f.Path, err)
	}
	size := j.f.Size
	pf, h, have, resumed, err := j.openPart(size)
	if err != nil {
		return err
	}
	defer pf.Close()
	if first {
		j.result.Resumed = resumed
		j.c.Progress.Start(j.f.Path, size, have)
		if resumed {
			j.c.Logf("%s: resuming from byte %d", j.f.Path, have)
		}
	} else {
		j.c.Progress.Start(j.f.Path, size, have)
	}

	s := newStream(j, pf, h, have, size)
	if size < 0 || size > have {
		parent := ctx
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		sinkErr := make(chan error, 1)
		go func() { sinkErr <- s.sink(cancel) }()
		var netErr error
		var once sync.Once
		fail := func(err error) {
			once.Do(func() { netErr = err })
			if parent.Err() == nil {
				// A real failure stops the other connections. When the caller cancelled,
				// the connections still hand over what they read, for the next run.
				s.fail(err)
			}
			cancel()
		}
		// spread downloads [from, size) of a file of known size: in parallel ranges when
		// what this attempt fetches (from have on) is large enough, else on one connection.
		spread := func(from, size int64) {
			if j.noRanges || size-have < j.c.MinChunk || j.c.Conns == 1 {
				if err := j.fetchRange(ctx, s, from, size); err != nil {
					fail(err)
				}
				return
			}
			var next atomic.Int64
			next.Store(from)
			conns := j.c.Conns
			if n := (size - from + j.c.ChunkSize - 1) / j.c.ChunkSize; int64(conns) > n {
				conns = int(n)
			}
			var cw sync.WaitGroup
			for range conns {
				cw.Add(1)
				go func() {
					defer cw.Done()
					for ctx.Err() == nil {
						a := next.Add(j.c.ChunkSize) - j.c.ChunkSize
						if a >= size {
							return
						}
						b := min(a+j.c.ChunkSize, size)
						if err := j.fetchRange(ctx, s, a, b); err != nil {
							fail(err)
							return
						}
					}
				}()
			}
			cw.Wait()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case size >= 0:
				spread(have, size)
			case j.noRanges || j.c.Conns == 1:
				if err := j.fetchRange(ctx, s, have, -1); err != nil {
					fail(err)
				}
			default:
				// The size is unknown: ask for the first chunk; the answer states the
				// size (Content-Range, or the Content-Length of a 200 that carries the
				// whole file), and the rest is fetched as for a known size.
				end := have + j.c.ChunkSize
				reached, err := j.fetchRangeTo(ctx, s, have, end)
				if err != nil {
					fail(err)
					return
				}
				switch n := s.knownSize(); {
				case n >= 0 && reached < n:
					spread(reached, n)
				case n < 0:
					// Still unknown (Content-Range "bytes A-B/*"): the rest on one connection.
					if err := j.fetchRange(ctx, s, reached, -1); err != nil {
						fail(err)
					}
				}
			}
		}()
		wg.Wait()
		s.finish()
		err := <-sinkErr
		cancel()
		// The first cause ends the attempt: a write error (a full disk) cancels the
		// connections, and their "context canceled" must not hide it.
		if netErr != nil && (err == nil || !errors.Is(netErr, context.Canceled)) {
			err = netErr
		}
		if err != nil {
			// Keep what arrived in order for the next run, unless the part is going to be
			// thrown away anyway.
			if s.written == 0 {
				pf.Close()
				j.removePart()
			} else if !errors.Is(err, errRangeIgnored) && !errors.Is(err, errStartOver) && !errors.Is(err, errWholeFile) {
				if cerr := s.checkpoint(); cerr != nil {
					j.c.Logf("%s: saving resume point: %v", j.f.Path, cerr)
				}
			}
			return err
		}
	}
	return j.finalize(pf, s)
}

// finalize checks size and digest, fsyncs and renames the part into place.
func (j *job) finalize(pf *os.File, s *stream) error {
	got := s.written
	if j.f.Size >= 0 && got != j.f.Size {
		return &MismatchError{Path: j.f.Path, What: "size", Expected: fmt.Sprint(j.f.Size), Actual: fmt.Sprint(got)}
	}
	if s.size >= 0 && got != s.size {
		return &MismatchError{Path: j.f.Path, What: "size", Expected: fmt.Sprint(s.size), Actual: fmt.Sprint(got)}
	}
	sum := hex.EncodeToString(s.h.sha256.Sum(nil))
	if j.f.SHA256 != "" {
		if sum != j.f.SHA256 {
			return &MismatchError{Path: j.f.Path, What: "sha256", Expected: j.f.SHA256, Actual: sum}
		}
	} else {
		var gitSum string
		if s.h.git != nil {
			gitSum = hex.EncodeToString(s.h.git.Sum(nil))
		} else {
			// The size was unknown when the download began: hash the small file again.
			g, err := gitBlobSHA1(j.part)
			if err != nil {
				return err
			}
			gitSum = g
		}
		if gitSum != j.f.GitSHA1 {
			return &MismatchError{Path: j.f.Path, What: "git-sha1", Expected: j.f.GitSHA1, Actual: gitSum}
		}
	}
	if err := pf.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", j.part, err)
	}
	if err := os.MkdirAll(filepath.Dir(j.final), 0o755); err != nil {
		return fmt.Errorf("creating folder for %s: %w", j.f.Path, err)
	}
	if err := os.Rename(j.part, j.final); err != nil {
		return fmt.Errorf("renaming %s: %w", j.part, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(j.final)); err != nil {
		return err
	}
	// What was renamed must be the file whose bytes were hashed, not another one put at
	// the part's name meanwhile.
	if same, err := sameFile(pf, j.final); err != nil {
		return err
	} else if !same {
		_ = os.Remove(j.final)
		return fmt.Errorf("%s was replaced by another file while it was downloaded; removed it", j.final)
	}
	_ = os.Remove(j.side)
	_ = os.Remove(j.side + ".tmp")
	j.result.Size = got
	j.result.SHA256 = sum
	return nil
}

// sameFile reports whether the open file f is the file at path.
func sameFile(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", f.Name(), err)
	}
	b, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", path, err)
	}
	return os.SameFile(a, b), nil
}

// fetchRange downloads bytes [a, b) (b < 0: to the end) with retries, delivering them to s.
// A refused or dropped connection, a 5xx, 408 or 429 answer or a stall is retried from the
// byte reached, after a wait that doubles (with jitter, up to 10s) and starts again
// whenever bytes arrived, and that is at least what a Retry-After or RateLimit header asks;
// it gives up once the file has received no byte for NoProgress.
func (j *job) fetchRange(ctx context.Context, s *stream, a, b int64) error {
	_, err := j.fetchRangeTo(ctx, s, a, b)
	return err
}

// fetchRangeTo is fetchRange that also returns the position reached: past b when a 200
// answer to the first request of a file carried the whole file, or the end of a file
// shorter than b.
func (j *job) fetchRangeTo(ctx context.Context, s *stream, a, b int64) (int64, error) {
	pos := a
	wait := j.c.RetryWait
	for {
		before := pos
		err := j.request(ctx, s, &pos, b)
		if err == nil {
			return pos, nil
		}
		if ctx.Err() != nil {
			return pos, ctx.Err()
		}
		var te *transientError
		if !errors.As(err, &te) {
			return pos, err
		}
		if pos > before {
			wait = j.c.RetryWait
		}
		if j.c.Retries < 0 {
			return pos, fmt.Errorf("downloading %s from %s: %w (retries are off)", j.f.Path, redact.URL(j.f.URL), te.err)
		}
		idle := time.Since(time.Unix(0, j.lastByte.Load()))
		left := j.c.NoProgress - idle
		if left <= 0 {
			return pos, fmt.Errorf("downloading %s from %s: no byte for %s, the no-progress budget: giving up this file after: %w",
				j.f.Path, redact.URL(j.f.URL), idle.Round(time.Second), te.err)
		}
		if j.noRanges && pos > 0 {
			// The server cannot continue a range: start the file over.
			return pos, errRangeIgnored
		}
		d := jitter(wait)
		if te.after > d {
			d = te.after
		}
		d = min(d, left)
		if te.after > 0 {
			j.c.Logf("%s: the server asks to wait %s; retrying from byte %d in %s after: %v", j.f.Path, te.after, pos, d.Round(time.Millisecond), te.err)
		} else {
			j.c.Logf("%s: retrying from byte %d in %s after: %v", j.f.Path, pos, d.Round(time.Millisecond), te.err)
		}
		if !sleepCtx(ctx, d) {
			return pos, ctx.Err()
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// jitter returns a wait between d/2 and d, so that connections that failed together do
// not all come back at the same instant.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// transientError is an error worth retrying (dropped connection, 5xx, stall); after is
// the wait the server asked for (Retry-After, RateLimit), or 0.
type transientError struct {
	err   error
	after time.Duration
}

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// stallReader resets the stall timer whenever bytes arrive.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	return n, err
}

// request makes one HTTP request for [*pos, b) and delivers what arrives, advancing *pos.
func (j *job) request(ctx context.Context, s *stream, pos *int64, b int64) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var stalled atomic.Bool
	stall := j.c.StallTimeout
	timer := time.AfterFunc(stall, func() { stalled.Store(true); cancel(&StallError{Timeout: stall}) })
	defer timer.Stop()
	transient := func(err error) error {
		if stalled.Load() {
			return &transientError{err: fmt.Errorf("stalled: no bytes for %s", stall)}
		}
		return &transientError{err: err}
	}

	// After a redirect, later ranges of the file go straight to where it led (a CDN URL
	// signed for a while), saving a round trip per range; when that stops working the
	// original URL is asked again.
	target, cached := j.f.URL, false
	if t := j.target.Load(); t != nil {
		target, cached = *t, true
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("downloading %s: bad URL %s", j.f.Path, redact.URL(j.f.URL))
	}
	size := s.knownSize()
	ranged := *pos > 0 || (b >= 0 && b != size)
	if ranged {
		if b >= 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", *pos, b-1))
		} else {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-", *pos))
		}
	}
	req.Header.Set("Accept-Encoding", "identity")
	j.c.authorize(req)
	resp, err := j.c.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, ErrNoRetry) {
			return fmt.Errorf("downloading %s from %s: %w", j.f.Path, redact.URL(j.f.URL), err)
		}
		if cached {
			j.target.Store(nil)
		}
		return transient(fmt.Errorf("requesting %s: %w", redact.URL(j.f.URL), err))
	}
	defer resp.Body.Close()
	if cached && resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
		j.target.Store(nil)
		return transient(fmt.Errorf("redirect target of %s answered %s", redact.URL(j.f.URL), resp.Status))
	}
	if !cached && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent) {
		if final := resp.Request.URL.String(); final != j.f.URL {
			j.target.Store(&final)
		}
	}

	want := int64(-1) // bytes this answer should carry
	switch {
	case resp.StatusCode == http.StatusPartialContent && ranged:
		start, end, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			return transient(fmt.Errorf("answer from %s: %w", redact.URL(j.f.URL), err))
		}
		// A range may end early only where the file ends (a file of unknown size that is
		// shorter than the first range asked for).
		short := total >= 0 && end == total-1 && end < b-1
		if start != *pos || (b >= 0 && end != b-1 && !short) {
			return transient(fmt.Errorf("answer from %s has range %d-%d, asked %d-%d", redact.URL(j.f.URL), start, end, *pos, b-1))
		}
		if total >= 0 {
			if err := s.setSize(total); err != nil {
				return err
			}
		}
		want = end + 1 - start
	case resp.StatusCode == http.StatusOK && ranged && !(*pos == 0 && size < 0):
		return errRangeIgnored
	case resp.StatusCode == http.StatusOK:
		if ranged {
			// The first request for a file of unknown size: the whole file comes on this
			// connection, and the server cannot continue a range.
			j.noRanges = true
		}
		if resp.ContentLength >= 0 {
			if err := s.setSize(resp.ContentLength); err != nil {
				return err
			}
			want = resp.ContentLength
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && ranged && *pos == 0 && size < 0:
		// The first range of a file of unknown size is refused: an empty file.
		return errWholeFile
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && ranged && (b < 0 || size < 0):
		return errStartOver
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout:
		return &transientError{err: fmt.Errorf("%s answered %s", redact.URL(j.f.URL), resp.Status), after: httpwait.ServerWait(resp.Header, time.Now())}
	default:
		return newStatusError(j.f.Path, j.f.URL, resp)
	}

	body := &stallReader{r: j.bound(resp.Body, s, *pos, want), timer: timer, d: stall}
	got := int64(0)
	for want < 0 || got < want {
		timer.Stop()
		pc, err := s.acquire(ctx, *pos)
		if err != nil {
			return err
		}
		timer.Reset(stall)
		buf := pc.buf
		if want >= 0 && int64(len(buf)) > want-got {
			buf = buf[:want-got]
		}
		n, rerr := io.ReadFull(body, buf)
		if n > 0 {
			j.net.Add(int64(n))
			j.lastByte.Store(time.Now().UnixNano())
			pc.data = buf[:n]
			pc.off = *pos
			s.deliver(pc)
			*pos += int64(n)
			got += int64(n)
		} else {
			s.release(pc)
		}
		if rerr != nil {
			if be := (*boundError)(nil); errors.As(rerr, &be) {
				return be.err
			}
			if want < 0 && (rerr == io.EOF || rerr == io.ErrUnexpectedEOF) {
				if err := s.setSize(*pos); err != nil {
					return err
				}
				return nil
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				return transient(fmt.Errorf("connection closed after %d of %d bytes", got, want))
			}
			return transient(fmt.Errorf("reading from %s: %w", redact.URL(j.f.URL), rerr))
		}
	}
	return nil
}

// parseContentRange parses "bytes START-END/TOTAL" (TOTAL may be "*", returned as -1).
func parseContentRange(v string) (start, end, total int64, err error) {
	var totalStr string
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
	}
	rng, totalStr, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
	}
	if _, err := fmt.Sscanf(rng, "%d-%d", &start, &end); err != nil || start < 0 || end < start {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
	}
	total = -1
	if totalStr != "*" {
		if _, err := fmt.Sscanf(totalStr, "%d", &total); err != nil {
			return 0, 0, 0, fmt.Errorf("bad Content-Range %q", v)
		}
	}
	return start, end, total, nil
}

// gitBlobSHA1 returns the git blob sha1 of the file at path.
func gitBlobSHA1(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", st.Size())
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func verifyFile(path string, f File) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verifying %s: %w", path, err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("verifying %s: %w", path, err)
	}
	if f.Size >= 0 && st.Size() != f.Size {
		return &MismatchError{Path: path, What: "size", Expected: fmt.Sprint(f.Size), Actual: fmt.Sprint(st.Size())}
	}
	if f.SHA256 != "" {
		h := sha256.New()
		if _, err := io.CopyBuffer(h, fh, make([]byte, 1<<20)); err != nil {
			return fmt.Errorf("verifying %s: %w", path, err)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != strings.ToLower(f.SHA256) {
			return &MismatchError{Path: path, What: "sha256", Expected: strings.ToLower(f.SHA256), Actual: sum}
		}
		return nil
	}
	if f.GitSHA1 == "" {
		return fmt.Errorf("verifying %s: no sha256 or git sha1 to check against", path)
	}
	sum, err := gitBlobSHA1(path)
	if err != nil {
		return err
	}
	if sum != strings.ToLower(f.GitSHA1) {
		return &MismatchError{Path: path, What: "git-sha1", Expected: strings.ToLower(f.GitSHA1), Actual: sum}
	}
	return nil
}

type nopReporter struct{}

func (nopReporter) Start(string, int64, int64) {}
func (nopReporter) Add(string, int64)          {}
func (nopReporter) Done(string, error)         {}

func removeParts(dest string) ([]string, error) {
	root := filepath.Join(dest, WorkDir, partsDir)
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) && p == root {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, suf := range []string{sideSuffix + ".tmp", sideSuffix, partSuffix} {
			if name, ok := strings.CutSuffix(rel, suf); ok {
				rel = name
				break
			}
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("removing %s: %w", p, err)
		}
		seen[rel] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("removing part files under %s: %w", root, err)
	}
	// Deepest first; a folder that is not empty (something else put there) stays.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
	_ = os.Remove(filepath.Join(dest, WorkDir))
	removed := make([]string, 0, len(seen))
	for rel := range seen {
		removed = append(removed, rel)
	}
	sort.Strings(removed)
	return removed, nil
}
