// Package fetch downloads files over HTTP(S): several files at once, large files in
// parallel byte ranges, sha256 computed in order while the bytes arrive (never by a second
// pass), written as a part file and renamed into place only when size and digest match. An
// interrupted download resumes from its verified prefix.
//
// On disk, a file in progress is DEST/.sglprov/parts/NAME.part (always a contiguous prefix
// of the file: ranges that arrive early wait in memory, within Options.MaxBuffer, until the
// bytes before them are written and hashed) and NAME.part.json beside it, the resume
// record: how many bytes of the part are hashed and the sha256 state after them, written
// after an fsync of the part. The .sglprov folder is one no listed file may enter, so a
// listed name can never be another file's part or record.
//
// A later run does not trust the recorded state over the bytes on disk: it hashes the part
// again from its first byte and goes on only when the state after the recorded prefix is
// the recorded one (else it starts the file over); without a record it hashes the part and
// the final digest decides; with a record of another version it starts over.
//
// A file whose size is not given is asked for with a ranged request; the size the answer
// states (Content-Range, or Content-Length of a 200) lets the rest come in parallel
// ranges as for a known size.
//
// Errors name the file; a URL in an error or a log line has no query string or user
// information, and the token is never in either.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/redact"
)

// WorkDir is the folder inside Options.Dest that holds the part files and resume records
// (in WorkDir/parts). A File.Path inside it is refused.
const WorkDir = ".sglprov"

const (
	partsDir   = "parts"
	partSuffix = ".part"
	sideSuffix = ".part.json"
)

// File is one file to download.
type File struct {
	// URL is where the bytes come from.
	URL string
	// Path is the destination path relative to Options.Dest, already validated by the
	// caller (relative, no ".."); Fetch checks it again and refuses an unsafe one.
	Path string
	// Size is the expected size in bytes, or -1 when unknown.
	Size int64
	// SHA256 is the expected sha256 as lower-case hex. It may be empty when only GitSHA1
	// is known (small files that the hub stores in git rather than LFS).
	SHA256 string
	// GitSHA1 is the expected git blob sha1 (sha1 of "blob SIZE\x00" and the content), used
	// when SHA256 is empty.
	GitSHA1 string
}

// Options tunes a Fetch call. The zero value of every field means its default.
type Options struct {
	// Dest is the destination folder; File.Path is relative to it.
	Dest string
	// Files is how many files download at once (default 4).
	Files int
	// Conns is the number of ranged connections per large file (default 8).
	Conns int
	// MinChunk: files smaller than this use one connection (default 64 MiB).
	MinChunk int64
	// ChunkSize is the size of one range request of a large file (default 2 MiB).
	ChunkSize int64
	// MaxBuffer bounds the bytes held in memory, over all files, for ranges that arrived
	// ahead of the hashed prefix (default 48 MiB). With N connections of equal speed a
	// file holds up to about (N-1)*ChunkSize ahead; beyond MaxBuffer the connections wait.
	MaxBuffer int64
	// StallTimeout cancels and retries a request that received no byte for this long,
	// its answer's headers included (default 60s). There is no total timeout.
	StallTimeout time.Duration
	// MinRate, when positive, is the fewest bytes per second an answer's body may bring,
	// measured over MinRateWindow of reading (default DefaultMinRateWindow; time spent
	// waiting for buffer space does not count): a slower answer is cancelled with a
	// *SlowError cause, as a stall is, and retried. 0 means no minimum (the origin: there
	// is nothing to fall back to); a registry sets one, so that a trickle gives way to the
	// origin.
	MinRate       int64
	MinRateWindow time.Duration
	// Retries is how many times a whole file is downloaded again after a digest or size
	// mismatch (default 1: once more, then the file fails naming both digests). Negative
	// means none, and no retry of a failing request either.
	Retries int
	// NoProgress is the retry budget of a file: a failing request (refused or dropped
	// connection, 5xx, 408, 429, stall) is retried for as long as the file received a
	// byte within this long; a file that receives none for NoProgress fails, alone, while
	// the others go on (default 10m).
	NoProgress time.Duration
	// RetryWait is the first wait between retries of a request; it doubles, with jitter,
	// up to 10s (default 1s). A Retry-After or RateLimit header on a 429 or 5xx answer
	// makes the wait at least what the server asks, within what is left of NoProgress.
	RetryWait time.Duration
	// CheckpointBytes is how often (in hashed bytes) the part file is fsynced and its
	// resume record NAME.part.json written, so that a killed run resumes from there
	// (default 256 MiB).
	CheckpointBytes int64
	// CheckpointEvery also writes the resume record when this long has passed since the
	// last one and bytes were hashed since (default 10s), so that a slow link loses at
	// most that much of a killed run.
	CheckpointEvery time.Duration
	// Client is the HTTP client (default: a client with sane transport timeouts). Its
	// CheckRedirect is wrapped so that the token never follows a redirect to another host.
	Client *http.Client
	// Token is a bearer token sent as "Authorization: Bearer TOKEN", only to TokenHost.
	// It never appears in an error or a log line.
	Token string
	// TokenHost is the only host ("host:port"; the port may be omitted for the scheme's
	// default) the token is sent to, compared exactly, on the first request and on every
	// redirect hop.
	TokenHost string
	// Progress receives progress events; nil means none.
	Progress Reporter
	// FreeSpace returns the bytes free for an unprivileged user in dir (default statfs).
	FreeSpace func(dir string) (uint64, error)
	// Logf receives retry and resume notes (default: discarded). URLs are redacted.
	Logf func(format string, args ...any)
	// DNSError, when set, is called once per Fetch call, at the first request whose host
	// name does not resolve, so that the caller can say so at once (as an error, with its
	// fix); the request is still retried within its budget, each wait logged.
	DNSError func(host string, err error)
}

// Result describes one file after Fetch.
type Result struct {
	// Path is the file's path relative to Options.Dest.
	Path string
	// Size is the file's size in bytes.
	Size int64
	// SHA256 is the digest computed while downloading, as hex. For a file that was already
	// present (Present) it is File.SHA256 as given: Fetch did not re-hash it.
	SHA256 string
	// Bytes is how many bytes came over the network for this file (retries included).
	Bytes int64
	// Resumed is set when the download continued an earlier part file.
	Resumed bool
	// Present is set when the file was already at its destination with the expected size
	// and nothing was downloaded. Whether to re-hash it is the caller's decision (VerifyFile).
	Present bool
	// Duration is the wall time spent on this file.
	Duration time.Duration
}

// Reporter receives progress events. Calls for different files may come concurrently.
type Reporter interface {
	// Start is called when a file's download begins, and again when it starts over after
	// a mismatch: size is its total (-1 unknown) and have the bytes already there from an
	// earlier run.
	Start(file string, size, have int64)
	// Add reports n more bytes of file written (n is negative when a file starts over).
	Add(file string, n int64)
	// Done is called once when the file is finished; err is nil on success.
	Done(file string, err error)
}

// MismatchError reports a file whose size or digest is not the expected one.
type MismatchError struct {
	// Path is the file's path relative to Dest (or as given to VerifyFile).
	Path string
	// What is "size", "sha256" or "git-sha1".
	What string
	// Expected and Actual are the expected and the actual value.
	Expected, Actual string
}

// Error implements error.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s: %s mismatch: expected %s, got %s", e.Path, e.What, e.Expected, e.Actual)
}

// ErrNoRetry, wrapped in the error of an Options.Client's transport, says that asking again
// is pointless (a source that has been given up for the run): the file fails at once
// rather than retrying for its no-progress budget.
var ErrNoRetry = errors.New("not to be asked again")

// FilesError reports the files of a Fetch call that failed while the others finished.
type FilesError struct {
	// Failed holds one error per failed file, in the order of the files; each names its
	// file.
	Failed []error
	// Total is the number of files of the call.
	Total int
}

// Error implements error.
func (e *FilesError) Error() string {
	if len(e.Failed) == 1 {
		return e.Failed[0].Error()
	}
	msgs := make([]string, len(e.Failed))
	for i, err := range e.Failed {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("%d of %d files failed: %s", len(e.Failed), e.Total, strings.Join(msgs, "; "))
}

// Unwrap returns the errors of the failed files.
func (e *FilesError) Unwrap() []error { return e.Failed }

// StatusError is an answer that retrying cannot change (a 4xx other than 408 and 429, or
// an unexpected status), with what the server said about it: the hub names the cause of a
// refusal in X-Error-Code (GatedRepo, RepoNotFound, ...) and X-Error-Message.
type StatusError struct {
	// Path is the file's path relative to Dest.
	Path string
	// URL is the file's URL without its query string or user information.
	URL string
	// Status is the HTTP status code.
	Status int
	// Code and Message are the answer's X-Error-Code and X-Error-Message ("" when absent;
	// Message at most 300 bytes).
	Code, Message string
}

// Error implements error.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("downloading %s: %s answered %d %s", e.Path, e.URL, e.Status, http.StatusText(e.Status))
	switch {
	case e.Code != "" && e.Message != "":
		s += " (" + e.Code + ": " + e.Message + ")"
	case e.Code != "" || e.Message != "":
		s += " (" + e.Code + e.Message + ")"
	}
	return s
}

// maxErrorMessage bounds the X-Error-Message kept in a StatusError.
const maxErrorMessage = 300

func newStatusError(path, rawURL string, resp *http.Response) *StatusError {
	msg := strings.TrimSpace(resp.Header.Get("X-Error-Message"))
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage] + "..."
	}
	code := strings.TrimSpace(resp.Header.Get("X-Error-Code"))
	if len(code) > 64 {
		code = code[:64]
	}
	return &StatusError{Path: path, URL: redact.URL(rawURL), Status: resp.StatusCode, Code: code, Message: redact.Userinfo(msg)}
}

// SpaceError reports that the destination has too little free space for the download.
type SpaceError struct {
	// Dir is the folder whose file system was checked.
	Dir string
	// Need and Free are bytes.
	Need, Free uint64
}

// Error implements error.
func (e *SpaceError) Error() string {
	return fmt.Sprintf("not enough free space in %s: need %s, %s free", e.Dir, FormatBytes(int64(e.Need)), FormatBytes(int64(e.Free)))
}

// FormatBytes formats n bytes in binary units ("1.5 GiB"), as logval.Format does.
func FormatBytes(n int64) string { return logval.Format(n) }

// Fetch downloads files into opt.Dest and returns one Result per file, in the order of
// files. Files already present with their expected size are not downloaded (Result.Present).
// Free space for all remaining bytes is checked before the first byte. A file that fails
// does not stop the others: Fetch returns the results of the files that finished and,
// when any failed, a *FilesError naming every failed file (when ctx is cancelled, the
// cancellation instead); part files stay in place so that the next call resumes them.
func Fetch(ctx context.Context, files []File, opt Options) ([]Result, error) {
	return fetch(ctx, files, opt)
}

// VerifyFile hashes the file at path and checks it against f's size and digest (SHA256, or
// GitSHA1 when SHA256 is empty). A mismatch is a *MismatchError.
func VerifyFile(path string, f File) error {
	return verifyFile(path, f)
}

// RemoveParts removes every part file and resume record under dest/.sglprov/parts, then
// the folders left empty (.sglprov included). Call it only once every file of dest is
// complete: what is left then belongs to files that are no longer listed. It returns the
// paths, relative to dest, of the files whose parts were removed, sorted.
func RemoveParts(dest string) ([]string, error) {
	return removeParts(dest)
}
