package download

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/netretry"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/redact"
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
	// Owned is what this step wrote into dest (its host path), for remove and gc.
	Owned manifest `json:"owned,omitzero"`
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
		Retries: retries, RetryWait: s.retryWait, RetryFor: s.apiRetryFor(env, retries),
		Log: func(level slog.Level, msg string, keyvals ...any) {
			switch {
			case level < slog.LevelError:
				env.Log.Info(msg, keyvals...)
			case !s.dnsSaid.CompareAndSwap(false, true):
				// Said once for the step, whichever of its clients met it first.
			case retries < 0:
				// plan and the fingerprint: nothing fails for it (plan says what it could
				// not ask), so it is a warning; apply's error comes with its retries.
				env.Log.Warn(msg, keyvals...)
			default:
				env.Log.Error(msg, keyvals...)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the hub client: %w", err)
	}
	return c, nil
}

// apiRetryFor is how long a failing hub API request of apply is retried: the recipe's
// network.retry_for, the budget every step that reaches the network shares (none for
// plan's and the fingerprint's requests, made with retries -1, which must not hold plan
// for minutes).
func (s *Step) apiRetryFor(env *engine.Env, retries int) time.Duration {
	if retries < 0 {
		return 0
	}
	if env.NetworkRetryFor > 0 {
		return env.NetworkRetryFor
	}
	return netretry.DefaultBudget
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
	if errors.As(err, &space) && !errors.Is(err, exitcode.ErrHost) {
		err = fmt.Errorf("%w: %w", exitcode.ErrHost, err)
	}
	return redact.Error(err)
}

func (s *Step) run(ctx context.Context, env *engine.Env, slot engine.CacheSlot) error {
	start := time.Now()
	rec := record{Files: map[string]fileRecord{}}
	old, hadOld := s.loadRecord(env)
	if hadOld {
		rec.Files = old.Files
	}
	top := env.Path(s.spec.Dest)
	if err := ownership.CheckDest(env.Root, "dest", top); err != nil {
		return err
	}
	rec.Owned = s.carryManifest(top, old, hadOld)
	var missing []fetch.File // what was not at dest before this run wrote it
	var made []string        // the folders that were not there
	began := false           // dest is made: from here on the run may write there
	// What this run wrote is recorded however it ends: a remove deletes it, and only it.
	defer func() {
		if began {
			rec.Owned.made(top, made)
			s.noteWritten(top, &rec, missing)
			_ = env.SaveData(rec)
		}
	}()
	if s.spec.HF != nil {
		env.Detail(engine.HubDetail, s.spec.HF.Repo)
	}
	artifact := s.lookupListing(ctx, env, slot)
	var listing *cacheListing
	if artifact != nil {
		listing = s.listingFrom(env, artifact)
	}
	files, hubc, err := s.list(ctx, env, artifact, listing, &rec)
	if err != nil {
		return err
	}
	want := expect(&rec, files)
	dest := s.root(env, rec.Commit)
	if made, err = s.makeDest(env, top, dest, &rec, files); err != nil {
		return err
	}
	began = true
	if s.hfCache() {
		if err := s.relink(dest, files, rec.Owned.wrote); err != nil {
			return err
		}
	}

	todo, kept, err := s.sortOut(ctx, env, dest, files, &rec)
	if err != nil {
		return err
	}
	missing = slices.Clone(todo)
	if err := env.SaveData(rec); err != nil {
		return fmt.Errorf("recording verified files: %w", err)
	}
	fetched, bytes, fromReg, err := s.download(ctx, env, slot, listing, dest, todo, kept, &rec, hubc)
	if err != nil {
		return err
	}
	if err := s.settle(env, dest, files, want, &rec); err != nil {
		return err
	}
	// Taken from the cache: the listing, or every file fetched, came from the registry.
	if artifact != nil && fromReg == len(fetched) && (listing != nil || fromReg > 0) {
		env.FromCache(artifact.Digest)
	}
	s.reportDone(env, &rec, len(fetched), kept, bytes, start)

	if err := s.checkWeights(dest, rec.Expected); err != nil {
		return fmt.Errorf("checking downloaded weights: %w", err)
	}
	return nil
}

// makeDest makes the folder the files download into, first refusing (as
// huggingface_hub's cache) a link in the way; it returns the folders it made.
func (s *Step) makeDest(env *engine.Env, top, dest string, rec *record, files []fetch.File) ([]string, error) {
	if s.hfCache() {
		if err := s.checkLinks(env.Path(s.spec.Dest), rec.Commit, rec.Revision, files); err != nil {
			return nil, err
		}
	}
	made := s.missingDirs(top, rec.Commit, files)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", s.shownRoot(rec.Commit), err)
	}
	rec.Owned.made(top, made)
	return made, nil
}

// settle finishes a download once every file is fetched: every expected file must be
// there; part files of files that left the listing go; as huggingface_hub's cache the
// files move into blobs behind the snapshot's links.
func (s *Step) settle(env *engine.Env, dest string, files []fetch.File, want map[string]bool, rec *record) error {
	for _, p := range rec.Expected {
		if _, ok := rec.Files[p]; !ok {
			return fmt.Errorf("downloading into %s: %s was not downloaded", s.spec.Dest, p)
		}
	}
	// Every listed file is complete: what is left in the part folder belongs to files
	// that left the listing.
	s.removeLeftParts(env, dest)
	s.removeOldParts(env, dest, want)
	if !s.hfCache() {
		return nil
	}
	// Again: a link put there while the files downloaded is refused as well.
	if err := s.checkLinks(env.Path(s.spec.Dest), rec.Commit, rec.Revision, files); err != nil {
		return err
	}
	if err := s.toBlobs(dest, files, rec.Revision, rec.Commit, rec.Owned.wrote); err != nil {
		return fmt.Errorf("laying out %s as huggingface_hub's cache: %w", s.spec.Dest, err)
	}
	env.Detail("snapshot", s.shownRoot(rec.Commit))
	return nil
}

// expect records the paths of files as rec.Expected, sorted, drops the records of files
// no longer expected, and returns the expected paths as a set.
func expect(rec *record, files []fetch.File) map[string]bool {
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
	return want
}

// reportDone states the run's figures as details and a log line.
func (s *Step) reportDone(env *engine.Env, rec *record, fetched, kept int, bytes int64, start time.Time) {
	elapsed := time.Since(start)
	env.Detail("files", len(rec.Expected))
	env.Detail("files_fetched", fetched)
	env.Detail("files_kept", kept)
	env.Detail("bytes", bytes)
	env.Detail("duration", elapsed.Round(time.Millisecond).String())
	env.Log.Info("download complete", "files", len(rec.Expected), "fetched", fetched, "bytes", logval.Bytes(bytes), "seconds", logval.Seconds(elapsed))
}

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
