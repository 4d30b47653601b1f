package fetch

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// StallError is the cause (context.Cause) with which a request's context is cancelled
// when the request received no byte for Options.StallTimeout: a RoundTripper under Fetch
// (a registry's client) can tell a stall from the other cancellations.
type StallError struct {
	// Timeout is the stall timeout that ran out.
	Timeout time.Duration
}

// Error implements error.
func (e *StallError) Error() string { return fmt.Sprintf("stalled: no bytes for %s", e.Timeout) }

// UnknownSizeReserve is what a download of unknown size leaves free on its file system:
// such a download may write the free space less this reserve (measured when its request
// is made), and no more, unless its answer states a length that fits in half the free
// space.
const UnknownSizeReserve = 1 << 30

// TooLongError reports a server that sent more bytes than the file can have: more than
// its known size (the listing, a manifest's descriptor, a recipe's `size:`), or, for a
// file of unknown size, more than the free space less UnknownSizeReserve. The download
// stops at the first byte too many and its part is removed.
type TooLongError struct {
	// Path is the file's path relative to Dest.
	Path string
	// Limit is the most bytes the file may have.
	Limit int64
	// Known is set when Limit is the file's known size; else it is the free space in Dir
	// less Reserve.
	Known bool
	// Dir is the folder whose free space was checked (size unknown only).
	Dir string
	// Reserve is the space kept free (size unknown only).
	Reserve int64
}

// Error implements error.
func (e *TooLongError) Error() string {
	if e.Known {
		return fmt.Sprintf("%s: the server sent more than the %d bytes the file has; stopped at the first byte more and removed the part", e.Path, e.Limit)
	}
	return fmt.Sprintf("%s: the server sent more than %s and gave no size; stopped there to keep %s free in %s (a file of unknown size may take the free space less that reserve: give its size to download it whole)",
		e.Path, FormatBytes(e.Limit), FormatBytes(e.Reserve), e.Dir)
}

// limitedBody reads at most left bytes of r; one byte more is a *TooLongError, the end of
// the body right at the limit is io.EOF.
type limitedBody struct {
	r    io.Reader
	left int64
	err  *TooLongError
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(b.r, one[:]); n > 0 {
			return 0, &boundError{b.err}
		}
		// Every byte the file may have has come: a server that keeps the connection
		// open after them (or drops it) ends the body here; the digest decides.
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// bound limits the body of one answer. For a file of known size, an answer that states
// its length is read to that length and no further already; one that states none is
// limited to the bytes the file has left after pos. For a file whose size was not given,
// every answer is limited to the free space less the reserve (and to the size an earlier
// answer stated), or, when it states a length that fits in half the free space, to that
// length.
func (j *job) bound(body io.Reader, s *stream, pos, want int64) io.Reader {
	n := s.knownSize()
	if j.f.Size >= 0 {
		if want >= 0 {
			return body
		}
		return &limitedBody{r: body, left: n - pos, err: &TooLongError{Path: j.f.Path, Limit: n, Known: true}}
	}
	dir := existingAncestor(filepath.Dir(j.part))
	free, err := j.c.FreeSpace(dir)
	if err != nil {
		return errReader{&boundError{fmt.Errorf("checking free space for %s, whose size is not known: %w", j.f.Path, err)}}
	}
	left := int64(0)
	if free > UnknownSizeReserve {
		left = int64(free - UnknownSizeReserve)
	}
	tl := &TooLongError{Path: j.f.Path, Limit: pos + left, Dir: dir, Reserve: UnknownSizeReserve}
	if n >= 0 && n-pos < left {
		left, tl = n-pos, &TooLongError{Path: j.f.Path, Limit: n, Known: true}
	}
	if want >= 0 && (want <= left || want <= int64(free/2)) {
		// The answer's stated length bounds it (the HTTP client reads no further): a
		// small file still comes where less than the reserve is free.
		return body
	}
	return &limitedBody{r: body, left: left, err: tl}
}

// boundError carries an error of a bounded body through the read loop, which retries
// the other read errors: a server that sends too much is not asked again.
type boundError struct{ err error }

func (e *boundError) Error() string { return e.err.Error() }
func (e *boundError) Unwrap() error { return e.err }

// errReader fails every read with its error.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// dropTooLong removes the part of a file whose server sent too much, its resume record,
// and the part folders left empty.
func (j *job) dropTooLong() {
	j.removePart()
	work := filepath.Join(j.c.Dest, WorkDir)
	for d := filepath.Dir(j.part); strings.HasPrefix(d, work) && os.Remove(d) == nil; d = filepath.Dir(d) {
	}
}
