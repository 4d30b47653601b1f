package download

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/redact"
	"github.com/sglprov/sglprov/pkg/safetensors"
)

// record is what the step keeps in the state between runs.
type record struct {
	// Repo, Revision and Commit name the hub source (empty for plain files).
	Repo     string `json:"repo,omitempty"`
	Revision string `json:"revision,omitempty"`
	Commit   string `json:"commit,omitempty"`
	// Expected lists every file the last run had to download, relative to dest, sorted.
	Expected []string `json:"expected"`
	// Files holds each verified file's stat and digest, by path relative to dest.
	Files map[string]fileRecord `json:"files"`
}

// fileRecord identifies a verified file cheaply: while size, mtime and inode stay the same
// it is not re-hashed.
type fileRecord struct {
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	Inode   uint64 `json:"inode"`
	SHA256  string `json:"sha256,omitempty"`
	GitSHA1 string `json:"git_sha1,omitempty"`
}

// statOf returns path's size, mtime and inode.
func statOf(p string) (fileRecord, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return fileRecord{}, err
	}
	if !fi.Mode().IsRegular() {
		return fileRecord{}, fmt.Errorf("%s is not a regular file", p)
	}
	r := fileRecord{Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		r.Inode = st.Ino
	}
	return r, nil
}

func (r fileRecord) sameStat(o fileRecord) bool {
	return r.Size == o.Size && r.MtimeNs == o.MtimeNs && r.Inode == o.Inode
}

func (r fileRecord) fetchFile(rel string) fetch.File {
	return fetch.File{Path: rel, Size: r.Size, SHA256: r.SHA256, GitSHA1: r.GitSHA1}
}

// matches reports whether the record's digest is the one f expects.
func (r fileRecord) matches(f fetch.File) bool {
	if f.SHA256 != "" {
		return r.SHA256 == f.SHA256
	}
	return f.GitSHA1 != "" && r.GitSHA1 == f.GitSHA1
}

func (s *Step) loadRecord(env *engine.Env) (record, bool) {
	var rec record
	if !env.LoadData(&rec) {
		return record{}, false
	}
	if rec.Files == nil {
		rec.Files = map[string]fileRecord{}
	}
	return rec, true
}

// Fingerprint adds the hub commit the revision names: the revision itself when it is a
// commit, else the commit the hub resolves it to now (one small request), so that a moved
// branch re-runs the step. Plain files add nothing beyond the recipe text.
func (s *Step) Fingerprint(ctx context.Context, env *engine.Env) (map[string]string, error) {
	if s.spec.HF == nil {
		return nil, nil
	}
	rev := s.revision()
	if hub.IsCommit(rev) {
		return map[string]string{"hf.commit": rev}, nil
	}
	if hub.Offline(s.getenv) {
		if rec, ok := s.loadRecord(env); ok && rec.Repo == s.spec.HF.Repo && rec.Revision == rev && rec.Commit != "" {
			return map[string]string{"hf.commit": rec.Commit}, nil
		}
		return map[string]string{"hf.commit": "unresolved " + rev}, nil
	}
	c, err := s.hubClient(env, -1)
	if err == nil {
		var commit string
		commit, err = c.ResolveRevision(ctx, s.spec.HF.Repo, rev)
		if err == nil {
			return map[string]string{"hf.commit": commit}, nil
		}
	}
	if rec, ok := s.loadRecord(env); ok && rec.Repo == s.spec.HF.Repo && rec.Revision == rev && rec.Commit != "" {
		env.Log.Warn("cannot resolve the revision now; using the commit recorded for it", "revision", rev, "commit", rec.Commit, "err", redact.Error(err))
		return map[string]string{"hf.commit": rec.Commit}, nil
	}
	env.Log.Warn("cannot resolve the revision now", "revision", rev, "err", redact.Error(err))
	return map[string]string{"hf.commit": "unresolved " + rev}, nil
}

// revision is the hub revision the recipe names ("main" when it names none; "" for
// `files:`, which have none).
func (s *Step) revision() string {
	if s.spec.HF == nil {
		return ""
	}
	if s.spec.HF.Revision == "" {
		return "main"
	}
	return s.spec.HF.Revision
}

// hubClient returns a client for the spec's hub; retries as in hub.Options.
func (s *Step) hubClient(env *engine.Env, retries int) (*hub.Client, error) {
	tokenFile := s.spec.HF.TokenFile
	if tokenFile != "" {
		tokenFile = env.Path(tokenFile)
		if err := engine.CheckSecretFile("hf.token_file", tokenFile, env.InsecurePermissions); err != nil {
			return nil, err
		}
	}
	c, err := hub.New(hub.Options{
		Endpoint: s.spec.HF.Endpoint, TokenFile: tokenFile, Getenv: s.getenv, HTTPClient: s.client,
		Retries: retries, RetryWait: s.retryWait, RetryFor: s.apiRetryFor(retries),
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the hub client: %w", err)
	}
	return c, nil
}

// apiRetryFor is how long a failing hub API request of apply is retried: the downloads'
// no-progress budget (none for plan's and the fingerprint's requests, made with retries
// -1, which must not hold plan for minutes).
func (s *Step) apiRetryFor(retries int) time.Duration {
	if retries < 0 {
		return 0
	}
	if s.noProgress > 0 {
		return s.noProgress
	}
	return 10 * time.Minute
}

// Intact reports whether every file the last run downloaded is still at dest, unchanged:
// a file whose size, mtime and inode are as recorded is taken as is (unless env.Verify);
// one whose stat changed is re-hashed, and its record refreshed when the digest still
// matches.
func (s *Step) Intact(ctx context.Context, env *engine.Env) (intact bool, reason string, err error) {
	rec, ok := s.loadRecord(env)
	if !ok || len(rec.Expected) == 0 {
		return false, "no record of an earlier download", nil
	}
	dest, shownDest := s.root(env, rec.Commit), s.shownRoot(rec.Commit)
	s.hashed = nil // only what this check hashes counts for the run that follows it
	refreshed := false
	// What was re-hashed is recorded whatever the answer: a re-run must not read the
	// same hundreds of GB again.
	defer func() {
		if refreshed && err == nil {
			if serr := env.SaveData(rec); serr != nil {
				intact, reason, err = false, "", fmt.Errorf("recording verified files: %w", serr)
			}
		}
	}()
	for _, rel := range rec.Expected {
		if err := ctx.Err(); err != nil {
			return false, "", err
		}
		shown := filepath.Join(shownDest, filepath.FromSlash(rel))
		fr, ok := rec.Files[rel]
		if !ok {
			return false, "outputs changed: " + shown + " (never verified)", nil
		}
		p := filepath.Join(dest, filepath.FromSlash(rel))
		cur, err := statOf(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, "outputs changed: " + shown + " (missing)", nil
		}
		if err != nil {
			return false, "", fmt.Errorf("checking %s: %w", shown, err)
		}
		if cur.sameStat(fr) && !env.Verify {
			continue
		}
		if err := fetch.VerifyFile(p, fr.fetchFile(rel)); err != nil {
			var mm *fetch.MismatchError
			if errors.As(err, &mm) {
				return false, "outputs changed: " + shown, nil
			}
			return false, "", fmt.Errorf("verifying %s: %w", shown, err)
		}
		s.rememberHashed(rel, cur)
		if !cur.sameStat(fr) {
			cur.SHA256, cur.GitSHA1 = fr.SHA256, fr.GitSHA1
			rec.Files[rel] = cur
			refreshed = true
		}
	}
	return true, "", nil
}

// rememberHashed notes that the file at rel, with stat cur, was hashed and found right.
func (s *Step) rememberHashed(rel string, cur fileRecord) {
	if s.hashed == nil {
		s.hashed = map[string]fileRecord{}
	}
	s.hashed[rel] = cur
}

// hashedNow reports whether this process already hashed the file at rel, unchanged since.
func (s *Step) hashedNow(rel string, cur fileRecord) bool {
	prev, ok := s.hashed[rel]
	return ok && prev.sameStat(cur)
}

// Run lists the files (from the hub at the resolved commit, or the recipe), keeps those
// recorded intact, downloads the rest, records each verified file, removes the part files
// of files no longer listed, and checks the safetensors headers and index. No URL in its
// error or log lines carries user information.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	return runError(s.run(ctx, env, engine.CacheSlot{}))
}

// RunCached is Run with the fleet cache: the listing and each blob come from the registry
// first, the rest from the origin (engine.CachedRunner).
func (s *Step) RunCached(ctx context.Context, env *engine.Env, slot engine.CacheSlot) error {
	return runError(s.run(ctx, env, slot))
}

// runError is the step's error as it leaves the step: no user information in a URL, and a
// download that cannot fit in the free space at dest (refused before its first byte) marked
// as a host that falls short (exit 4, as plan says it).
func runError(err error) error {
	var space *fetch.SpaceError
	if errors.As(err, &space) && !errors.Is(err, engine.ErrHost) {
		err = fmt.Errorf("%w: %w", engine.ErrHost, err)
	}
	return redact.Error(err)
}

func (s *Step) run(ctx context.Context, env *engine.Env, slot engine.CacheSlot) error {
	start := time.Now()
	rec := record{Files: map[string]fileRecord{}}
	if old, ok := s.loadRecord(env); ok {
		rec.Files = old.Files
	}
	var (
		files     []fetch.File
		token     string
		tokenHost string
		hubc      *hub.Client
	)
	artifact := s.lookupListing(ctx, env, slot)
	var listing *cacheListing
	if artifact != nil {
		listing = s.listingFrom(env, artifact)
	}
	if s.spec.HF != nil && listing != nil {
		// The fleet cache has the resolved listing: no hub request at all.
		c, err := s.hubClient(env, s.spec.Retries)
		if err != nil {
			return err
		}
		env.Log.Info("listing taken from the cache", "artifact", artifact.Digest, "commit", listing.Commit, "files", len(listing.Files))
		env.Detail("commit", listing.Commit)
		for _, f := range listing.Files {
			files = append(files, fetch.File{URL: c.ResolveURL(listing.Repo, listing.Commit, f.Path), Path: f.Path, Size: f.Size, SHA256: f.SHA256, GitSHA1: f.GitSHA1})
		}
		rec.Repo, rec.Revision, rec.Commit = listing.Repo, listing.Revision, listing.Commit
		token, tokenHost, hubc = c.Token(), c.TokenHost(), c
	} else if s.spec.HF != nil && hub.Offline(s.getenv) {
		// HF_HUB_OFFLINE: the listing recorded by the last run, and no request to the hub.
		old, ok := s.loadRecord(env)
		rev := s.revision()
		if !ok || old.Repo != s.spec.HF.Repo || old.Revision != rev || old.Commit == "" || len(old.Expected) == 0 {
			return fmt.Errorf("%w: HF_HUB_OFFLINE is set and no earlier run recorded the files of %s at %q: unset HF_HUB_OFFLINE for one run with the hub in reach", engine.ErrHost, s.spec.HF.Repo, rev)
		}
		var missing []string
		for _, p := range old.Expected {
			fr, ok := old.Files[p]
			if !ok {
				missing = append(missing, p)
				continue
			}
			files = append(files, fetch.File{Path: p, Size: fr.Size, SHA256: fr.SHA256, GitSHA1: fr.GitSHA1})
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: HF_HUB_OFFLINE is set and %d files of %s were never downloaded (%s): unset HF_HUB_OFFLINE to fetch them", engine.ErrHost, len(missing), s.spec.HF.Repo, strings.Join(missing, ", "))
		}
		env.Log.Info("HF_HUB_OFFLINE: the recorded listing, no hub request", "commit", old.Commit, "files", len(files))
		env.Detail("commit", old.Commit)
		rec.Repo, rec.Revision, rec.Commit = old.Repo, old.Revision, old.Commit
	} else if s.spec.HF != nil {
		c, err := s.hubClient(env, s.spec.Retries)
		if err != nil {
			return err
		}
		rev := s.revision()
		commit, err := c.ResolveRevision(ctx, s.spec.HF.Repo, rev)
		if err != nil {
			return err
		}
		if commit != rev {
			env.Log.Info("resolved revision", "repo", s.spec.HF.Repo, "revision", rev, "commit", commit)
		}
		env.Detail("commit", commit)
		listed, err := c.Files(ctx, s.spec.HF.Repo, commit, s.spec.HF.Include, s.spec.HF.Exclude)
		if err != nil {
			return err
		}
		if len(listed) == 0 {
			return fmt.Errorf("no file of %s at %s matches include %q and exclude %q", s.spec.HF.Repo, commit, s.spec.HF.Include, s.spec.HF.Exclude)
		}
		for _, f := range listed {
			if err := checkNotWorkDir(f.Path); err != nil {
				return fmt.Errorf("the listing of %s at %s: %w; leave it out with hf.exclude", s.spec.HF.Repo, commit, err)
			}
			files = append(files, fetch.File{URL: f.URL, Path: f.Path, Size: f.Size, SHA256: f.SHA256, GitSHA1: f.GitSHA1})
		}
		rec.Repo, rec.Revision, rec.Commit = s.spec.HF.Repo, rev, commit
		token, tokenHost, hubc = c.Token(), c.TokenHost(), c
	} else {
		for _, f := range s.spec.Files {
			size := f.Size
			if size == 0 {
				size = -1
			}
			files = append(files, fetch.File{URL: f.URL, Path: f.Path, Size: size, SHA256: f.SHA256})
		}
	}
	for _, f := range files {
		rec.Expected = append(rec.Expected, f.Path)
	}
	sort.Strings(rec.Expected)
	// Drop records of files that are no longer expected.
	want := map[string]bool{}
	for _, p := range rec.Expected {
		want[p] = true
	}
	for p := range rec.Files {
		if !want[p] {
			delete(rec.Files, p)
		}
	}
	dest := s.root(env, rec.Commit)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", s.shownRoot(rec.Commit), err)
	}
	if s.hfCache() {
		if err := s.relink(dest, files); err != nil {
			return err
		}
	}

	todo, kept, err := s.sortOut(ctx, env, dest, files, &rec)
	if err != nil {
		return err
	}
	if err := env.SaveData(rec); err != nil {
		return fmt.Errorf("recording verified files: %w", err)
	}
	var (
		fetched []fetch.Result
		bytes   int64
		fromReg int
	)
	if len(todo) > 0 && s.spec.HF != nil && hub.Offline(s.getenv) && slot.Cache == nil {
		var names []string
		for _, f := range todo {
			names = append(names, f.Path)
		}
		return fmt.Errorf("%w: HF_HUB_OFFLINE is set and %d files at %s are missing or changed (%s): unset HF_HUB_OFFLINE to fetch them again", engine.ErrHost, len(todo), s.spec.Dest, strings.Join(names, ", "))
	}
	if slot.Cache != nil && len(todo) > 0 {
		var regFetched []fetch.Result
		var regBytes int64
		todo, regFetched, regBytes, err = s.fetchFromCache(ctx, env, slot.Cache, dest, todo, &rec)
		if err != nil {
			return err
		}
		fetched, bytes, fromReg = append(fetched, regFetched...), bytes+regBytes, len(regFetched)
		env.Detail("files_from_cache", fromReg)
		env.Detail("bytes_from_cache", regBytes)
	}
	if listing != nil && len(todo) > 0 {
		// What the origin serves is described by the origin's listing, not the cache's:
		// a cached listing that is wrong about a file must not fail its fallback too.
		if todo, err = s.originEntries(ctx, env, listing, todo); err != nil {
			return err
		}
	}
	if len(todo) > 0 {
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
			Logf: func(format string, args ...any) { env.Log.Info(redact.Userinfo(fmt.Sprintf(format, args...))) },
		})
		closeRep()
		got, n, rerr := s.recordResults(dest, todo, results, &rec)
		fetched, bytes = append(fetched, got...), bytes+n
		if ferr == nil {
			ferr = rerr
		}
		if len(got) > 0 {
			env.Detail("files_from_origin", len(got))
		}
		if err := env.SaveData(rec); err != nil && ferr == nil {
			ferr = fmt.Errorf("recording verified files: %w", err)
		}
		if ferr != nil {
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
	}
	for _, p := range rec.Expected {
		if _, ok := rec.Files[p]; !ok {
			return fmt.Errorf("downloading into %s: %s was not downloaded", s.spec.Dest, p)
		}
	}
	// Every listed file is complete: what is left in the part folder belongs to files
	// that left the listing.
	removed, err := fetch.RemoveParts(dest)
	for _, rel := range removed {
		env.Log.Info("removed the part file of a file no longer listed", "file", filepath.Join(s.spec.Dest, filepath.FromSlash(rel)))
	}
	if err != nil {
		env.Log.Warn("cannot remove leftover part files", "err", err)
	}
	s.removeOldParts(env, dest, want)
	if s.hfCache() {
		if err := s.toBlobs(dest, files, rec.Revision, rec.Commit); err != nil {
			return fmt.Errorf("laying out %s as huggingface_hub's cache: %w", s.spec.Dest, err)
		}
		env.Detail("snapshot", s.shownRoot(rec.Commit))
	}
	// Taken from the cache: the listing, or every file fetched, came from the registry.
	if artifact != nil && fromReg == len(fetched) && (listing != nil || fromReg > 0) {
		env.FromCache(artifact.Digest)
	}
	elapsed := time.Since(start)
	env.Detail("files", len(rec.Expected))
	env.Detail("files_fetched", len(fetched))
	env.Detail("files_kept", kept)
	env.Detail("bytes", bytes)
	env.Detail("duration", elapsed.Round(time.Millisecond).String())
	env.Log.Info("download complete", "files", len(rec.Expected), "fetched", len(fetched), "bytes", logval.Bytes(bytes), "seconds", logval.Seconds(elapsed))

	if err := s.checkWeights(dest, rec.Expected); err != nil {
		return fmt.Errorf("checking downloaded weights: %w", err)
	}
	return nil
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

// removeOldParts removes the part files that earlier versions kept beside each file
// (NAME.part, NAME.part.json), unless the listing itself names them.
func (s *Step) removeOldParts(env *engine.Env, dest string, listed map[string]bool) {
	for rel := range listed {
		for _, suffix := range []string{".part", ".part.json", ".part.json.tmp"} {
			old := rel + suffix
			if listed[old] {
				continue
			}
			p := filepath.Join(dest, filepath.FromSlash(old))
			if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if err := os.Remove(p); err != nil {
				env.Log.Warn("cannot remove a part file left by an earlier version", "file", filepath.Join(s.spec.Dest, filepath.FromSlash(old)), "err", err)
				continue
			}
			env.Log.Info("removed a part file left beside its file by an earlier version", "file", filepath.Join(s.spec.Dest, filepath.FromSlash(old)))
		}
	}
}

// ownDigestDiffers says what is wrong when a downloaded file's result does not vouch for
// the bytes now at its path: a digest other than the listed one, or another size.
func ownDigestDiffers(f fetch.File, r fetch.Result, st fileRecord) string {
	switch {
	case r.SHA256 == "":
		return "the downloader computed no digest for it"
	case f.SHA256 != "" && r.SHA256 != f.SHA256:
		return fmt.Sprintf("its bytes hash to %s, not the listed %s", r.SHA256, f.SHA256)
	case st.Size != r.Size:
		return fmt.Sprintf("it has %d bytes, not the %d that were hashed", st.Size, r.Size)
	}
	return ""
}

// sortOut splits files into those to download and those already verified at dest. A file
// recorded with the same digest and stat is kept without reading it (unless env.Verify);
// a file present otherwise is hashed: kept and recorded when it matches, deleted when not.
func (s *Step) sortOut(ctx context.Context, env *engine.Env, dest string, files []fetch.File, rec *record) (todo []fetch.File, kept int, err error) {
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		p := filepath.Join(dest, filepath.FromSlash(f.Path))
		shown := filepath.Join(s.shownRoot(rec.Commit), filepath.FromSlash(f.Path))
		cur, serr := statOf(p)
		if errors.Is(serr, fs.ErrNotExist) {
			delete(rec.Files, f.Path)
			todo = append(todo, f)
			continue
		}
		if serr != nil {
			return nil, 0, fmt.Errorf("checking %s: %w", shown, serr)
		}
		if fr, ok := rec.Files[f.Path]; ok && fr.matches(f) && fr.sameStat(cur) && (!env.Verify || s.hashedNow(f.Path, cur)) {
			kept++
			continue
		}
		verr := fetch.VerifyFile(p, f)
		if verr == nil {
			cur.SHA256, cur.GitSHA1 = f.SHA256, f.GitSHA1
			rec.Files[f.Path] = cur
			kept++
			continue
		}
		var mm *fetch.MismatchError
		if !errors.As(verr, &mm) {
			return nil, 0, fmt.Errorf("verifying %s: %w", shown, verr)
		}
		env.Log.Warn("file differs from the source; downloading it again", "file", shown, "what", mm.What)
		delete(rec.Files, f.Path)
		if err := os.Remove(p); err != nil {
			return nil, 0, fmt.Errorf("removing %s: %w", shown, err)
		}
		todo = append(todo, f)
	}
	return todo, kept, nil
}

// checkWeights checks the header of every safetensors file and every index among files.
func (s *Step) checkWeights(dest string, files []string) error {
	for _, rel := range files {
		p := filepath.Join(dest, filepath.FromSlash(rel))
		switch {
		case strings.HasSuffix(rel, ".safetensors"):
			if _, err := safetensors.ReadHeader(p); err != nil {
				return err
			}
		case path.Base(rel) == safetensors.IndexFile:
			if _, err := safetensors.CheckIndex(filepath.Dir(p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// reporter returns the progress reporter for env's console and a function that stops it.
func (s *Step) reporter(env *engine.Env) (fetch.Reporter, func()) {
	if env.IsTerminal && env.Console != nil {
		r := fetch.NewTerminalReporter(env.Console)
		return r, r.Close
	}
	r := fetch.NewPipeReporter(func(msg string, keyvals ...any) { env.Log.Info(msg, keyvals...) }, 0)
	return r, r.Close
}
