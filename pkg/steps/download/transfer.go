// The transfer: the files still to fetch, from the fleet cache first and then the origin,
// each recorded once verified, and a failed download's errors explained (the hub's
// refusals, a host name that does not resolve).

package download

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/redact"
)

// download fetches todo into dest: from the fleet cache (slot) first, the rest from the
// origin, described by the origin's listing when the cache's listing was used. It returns
// the results of the files fetched, their bytes, and how many came from the cache. An
// offline run without the cache refuses to fetch anything.
func (s *Step) download(ctx context.Context, env *engine.Env, slot engine.CacheSlot, listing *cacheListing, dest string, todo []fetch.File, kept int, rec *record, hubc *hub.Client) (fetched []fetch.Result, bytes int64, fromReg int, err error) {
	if len(todo) > 0 && s.spec.HF != nil && hub.Offline(s.getenv) && slot.Cache == nil {
		var names []string
		for _, f := range todo {
			names = append(names, f.Path)
		}
		return nil, 0, 0, fmt.Errorf("%w: HF_HUB_OFFLINE is set and %d files at %s are missing or changed (%s): unset HF_HUB_OFFLINE to fetch them again", exitcode.ErrHost, len(todo), s.spec.Dest, strings.Join(names, ", "))
	}
	if slot.Cache != nil && len(todo) > 0 {
		var regFetched []fetch.Result
		var regBytes int64
		todo, regFetched, regBytes, err = s.fetchFromCache(ctx, env, slot.Cache, dest, todo, rec)
		if err != nil {
			return nil, 0, 0, err
		}
		fetched, bytes, fromReg = append(fetched, regFetched...), bytes+regBytes, len(regFetched)
		env.Detail("files_from_cache", fromReg)
		env.Detail("bytes_from_cache", regBytes)
	}
	if listing != nil && len(todo) > 0 {
		// What the origin serves is described by the origin's listing, not the cache's:
		// a cached listing that is wrong about a file must not fail its fallback too.
		if todo, err = s.originEntries(ctx, env, listing, todo); err != nil {
			return nil, 0, 0, err
		}
	}
	if len(todo) > 0 {
		got, n, err := s.fromOrigin(ctx, env, dest, todo, kept, rec, hubc)
		if err != nil {
			return nil, 0, 0, err
		}
		fetched, bytes = append(fetched, got...), bytes+n
	}
	return fetched, bytes, fromReg, nil
}

// fromOrigin downloads todo from the origin (with the hub's token when hubc is set),
// records each verified file in rec and saves it, and explains a failure.
func (s *Step) fromOrigin(ctx context.Context, env *engine.Env, dest string, todo []fetch.File, kept int, rec *record, hubc *hub.Client) ([]fetch.Result, int64, error) {
	var token, tokenHost string
	if hubc != nil {
		token, tokenHost = hubc.Token(), hubc.TokenHost()
	}
	var total int64
	for _, f := range todo {
		total += max(f.Size, 0)
	}
	env.Log.Info("downloading", "files", len(todo), "bytes", logval.Bytes(total), "kept", kept, "dest", s.spec.Dest)
	rep, closeRep := s.reporter(env)
	results, ferr := fetch.Fetch(ctx, todo, fetch.Options{
		Dest: dest, Files: s.spec.FilesAtOnce, Conns: s.spec.Connections,
		StallTimeout: s.stall, Retries: s.spec.Retries, NoProgress: s.noProgress, Client: s.client,
		Token: token, TokenHost: tokenHost, Progress: rep, FreeSpace: s.freeSpace,
		Logf:     func(format string, args ...any) { env.Log.Info(redact.Userinfo(fmt.Sprintf(format, args...))) },
		DNSError: s.dnsError(env, hubc),
	})
	closeRep()
	got, n, rerr := s.recordResults(dest, todo, results, rec)
	if ferr == nil {
		ferr = rerr
	}
	if len(got) > 0 {
		env.Detail("files_from_origin", len(got))
	}
	if err := env.SaveData(*rec); err != nil && ferr == nil {
		ferr = fmt.Errorf("recording verified files: %w", err)
	}
	if ferr != nil {
		return nil, 0, s.originError(env, hubc, rec, ferr)
	}
	return got, n, nil
}

// originError logs each file that failed and returns the download's error, the hub's
// refusals explained.
func (s *Step) originError(env *engine.Env, hubc *hub.Client, rec *record, ferr error) error {
	var fe *fetch.FilesError
	if errors.As(ferr, &fe) {
		for _, e := range fe.Failed {
			env.Log.Error("file failed", "err", redact.Error(e))
		}
		env.Detail("files_failed", len(fe.Failed))
	}
	if hubc != nil {
		ferr = explainRefusal(hubc, s.spec.HF.Repo, rec.Commit, ferr)
	}
	return fmt.Errorf("downloading into %s: %w", s.spec.Dest, ferr)
}

// removeLeftParts removes what is left in the part folder once every listed file is
// complete: the part files of files that left the listing.
func (s *Step) removeLeftParts(env *engine.Env, dest string) {
	removed, err := fetch.RemoveParts(dest)
	for _, rel := range removed {
		env.Log.Info("removed the part file of a file no longer listed", "file", filepath.Join(s.spec.Dest, filepath.FromSlash(rel)))
	}
	if err != nil {
		env.Log.Warn("cannot remove leftover part files", "err", err)
	}
}

// dnsError returns what the downloader calls at the first host name that does not
// resolve: an error line naming the host, and, for the hub's files, the endpoint and
// HF_ENDPOINT (never for plain URLs, which no hub mirror serves).
func (s *Step) dnsError(env *engine.Env, hubc *hub.Client) func(string, error) {
	return func(host string, err error) {
		if hubc != nil {
			env.Log.Error("the hub's host name does not resolve; retrying within the budget", "host", host, "endpoint", redact.URL(hubc.Endpoint()),
				"fix", "check the name in hf.endpoint or HF_ENDPOINT (unset for https://huggingface.co) and this host's DNS (/etc/resolv.conf, a proxy in /etc/sglprov/env)", "err", redact.Error(err))
			return
		}
		env.Log.Error("a download's host name does not resolve; retrying within the budget", "host", host,
			"fix", "check the URL's host and this host's DNS (/etc/resolv.conf, a proxy in /etc/sglprov/env)", "err", redact.Error(err))
	}
}

// explainRefusal turns the hub's refusals among a download's errors (401, 403, GatedRepo,
// RepoNotFound on a file's resolve URL: a gated or private repository, a token without
// access) into one error that names the cause and the fix, once for all the files it
// refused; the other errors follow it as they were.
func explainRefusal(c *hub.Client, repo, rev string, err error) error {
	var all []error
	if fe := (*fetch.FilesError)(nil); errors.As(err, &fe) {
		all = fe.Failed
	} else {
		all = []error{err}
	}
	var first *fetch.StatusError
	var refused int
	var rest []error
	for _, e := range all {
		var se *fetch.StatusError
		if errors.As(e, &se) && hub.Refused(se.Status, se.Code) {
			refused++
			if first == nil {
				first = se
			}
			continue
		}
		rest = append(rest, e)
	}
	if first == nil {
		return err
	}
	what := first.Code
	if what == "" {
		what = http.StatusText(first.Status)
	}
	msg := fmt.Sprintf("the hub refused %s of %s (%d %s", first.Path, repo, first.Status, what)
	if first.Message != "" {
		msg += ": " + first.Message
	}
	msg += ")"
	if refused > 1 {
		msg += fmt.Sprintf(", and %d more files the same way", refused-1)
	}
	if h := c.Hint(first.Status, first.Code, first.Message, repo, rev); h != "" {
		msg += "; " + h
	}
	refusal := &refusedError{msg: msg, cause: first}
	if len(rest) == 0 {
		return refusal
	}
	return errors.Join(append([]error{refusal}, rest...)...)
}

// refusedError is the hub's refusal of a download, explained.
type refusedError struct {
	msg   string
	cause *fetch.StatusError
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.cause }

// reporter returns the progress reporter for env's console and a function that stops it.
func (s *Step) reporter(env *engine.Env) (fetch.Reporter, func()) {
	if env.IsTerminal && env.Console != nil {
		r := fetch.NewTerminalReporter(env.Console)
		return r, r.Close
	}
	r := fetch.NewPipeReporter(func(msg string, keyvals ...any) { env.Log.Info(msg, keyvals...) }, 0)
	return r, r.Close
}
