// The top of a download: the files checked and their free space counted before a byte is
// written, one job per file run at most Files at a time, and each file's restarts.

package fetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	defaultFiles      = 4
	defaultConns      = 8
	defaultMinChunk   = 64 << 20
	defaultChunkSize  = 2 << 20
	defaultMaxBuffer  = 48 << 20
	defaultStall      = 60 * time.Second
	defaultRetries    = 1
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

func statfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("checking free space in %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
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
	jobs, err := newJobs(c, files)
	if err != nil {
		return nil, err
	}
	if err := checkSpace(c, jobs); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := runJobs(ctx, cancel, c, jobs)
	return collect(ctx, c, jobs, errs)
}

// newJobs checks each file (a safe path, listed once, with a digest) and makes its job.
func newJobs(c *config, files []File) ([]*job, error) {
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
	return jobs, nil
}

// checkSpace marks the files that are there already and refuses, before a byte is
// written, a download that cannot fit in the free space at dest.
func checkSpace(c *config, jobs []*job) error {
	// What is there already, and how much is left (nothing is written yet).
	var need uint64
	for _, j := range jobs {
		present, err := j.present()
		if err != nil {
			return err
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
			return fmt.Errorf("checking free space: %w", err)
		}
		if free < need {
			return &SpaceError{Dir: dir, Need: need, Free: free}
		}
	}
	return nil
}

// runJobs downloads the files not there yet, at most c.Files at a time, and returns each
// job's error. A full disk cancels them all.
func runJobs(ctx context.Context, cancel context.CancelFunc, c *config, jobs []*job) []error {
	p := newPool(c.MaxBuffer)
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
	return errs
}

// collect returns the results of the files that succeeded and the error of those that
// failed; when all are in place it removes the part folders left empty.
func collect(ctx context.Context, c *config, jobs []*job, errs []error) ([]Result, error) {
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

type nopReporter struct{}

func (nopReporter) Start(string, int64, int64) {}
func (nopReporter) Add(string, int64)          {}
func (nopReporter) Done(string, error)         {}
