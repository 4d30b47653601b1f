package download

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/redact"
)

// cacheListing is the config of a download step's artifact in the fleet cache: the
// resolved listing, so that a node with the cache needs no hub at all.
type cacheListing struct {
	Repo     string       `json:"repo,omitempty"`
	Revision string       `json:"revision,omitempty"`
	Commit   string       `json:"commit,omitempty"`
	Files    []listedFile `json:"files"`
}

// listedFile is one file of the listing; SHA256 is always set (the blob's digest).
type listedFile struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	GitSHA1 string `json:"git_sha1,omitempty"`
}

// lookupListing returns the artifact tagged with the step's fingerprint, or nil (no cache,
// none there, or a lookup that failed: that is said, and the origin is asked instead).
func (s *Step) lookupListing(ctx context.Context, env *engine.Env, slot engine.CacheSlot) *cache.Artifact {
	if slot.Cache == nil || slot.Tag == "" {
		return nil
	}
	a, err := slot.Lookup(ctx)
	switch {
	case err != nil:
		env.Log.Warn("cannot read the listing from the cache; asking the origin", "cache", slot.Cache.String(), "err", err)
		env.Detail("cache_error", err.Error())
		return nil
	case a != nil && a.Kind != cache.KindDownload:
		env.Log.Warn("the cache's artifact for this step is not a download's; asking the origin", "artifact", a.Digest, "kind", a.Kind)
		return nil
	}
	return a
}

// listingFrom decodes and checks an artifact's listing; nil when it does not fit the step
// (said in the log): another repo, no commit or not the commit the recipe pins, a file name
// that leaves dest, is listed twice or is in the downloader's work folder, or a file the
// step's include and exclude leave out (a listing is what a pusher would change to plant
// code next to the weights).
func (s *Step) listingFrom(env *engine.Env, a *cache.Artifact) *cacheListing {
	var l cacheListing
	err := json.Unmarshal(a.Meta, &l)
	if err == nil && s.spec.HF != nil && (l.Repo != s.spec.HF.Repo || !hub.IsCommit(l.Commit)) {
		err = fmt.Errorf("it lists %s at %q, the recipe names %s", l.Repo, l.Commit, s.spec.HF.Repo)
	}
	if s.spec.HF != nil {
		if rev := s.revision(); err == nil && hub.IsCommit(rev) && l.Commit != rev {
			err = fmt.Errorf("it lists commit %s, the recipe pins %s", l.Commit, rev)
		}
	}
	if err == nil && len(l.Files) == 0 {
		err = fmt.Errorf("it lists no file")
	}
	seen := map[string]bool{}
	for _, f := range l.Files {
		if err != nil {
			break
		}
		if seen[f.Path] {
			err = fmt.Errorf("file %q is listed twice", f.Path)
			break
		}
		seen[f.Path] = true
		if cerr := hub.CheckName(f.Path); cerr != nil {
			err = cerr
		} else if werr := checkNotWorkDir(f.Path); werr != nil {
			err = werr
		} else if hf := s.spec.HF; hf != nil && (len(hf.Include) > 0 && !hub.Match(hf.Include, f.Path) || hub.Match(hf.Exclude, f.Path)) {
			err = fmt.Errorf("file %q is not one the step's include and exclude select", f.Path)
		} else if !sha256RE.MatchString(f.SHA256) || f.Size < 0 {
			err = fmt.Errorf("file %q has sha256 %q and size %d", f.Path, f.SHA256, f.Size)
		}
	}
	if err != nil {
		env.Log.Warn("ignoring the cache's listing", "artifact", a.Digest, "err", err)
		return nil
	}
	return &l
}

// fetchFromCache fetches the files of todo that the registry holds as blobs, with the
// parallel ranged downloader, each file on its own so that one failing falls back to the
// origin alone. It returns the files left for the origin and those it fetched.
func (s *Step) fetchFromCache(ctx context.Context, env *engine.Env, c cache.Cache, dest string, todo []fetch.File, rec *record) (rest []fetch.File, fetched []fetch.Result, bytes int64, err error) {
	inReg, rest, gaveUp, err := askCache(ctx, env, c, todo)
	if err != nil {
		return nil, nil, 0, err
	}
	if len(rest) > 0 && gaveUp == nil {
		env.Log.Warn("the registry lacks files of this step; fetching them from the origin", "files", len(rest), "names", fileNames(rest, 5), "cache", c.String())
	}
	if len(inReg) == 0 {
		return rest, nil, 0, nil
	}
	var total int64
	for _, f := range inReg {
		total += max(f.Size, 0)
	}
	env.Log.Info("downloading from the cache", "files", len(inReg), "bytes", logval.Bytes(total), "cache", c.String())
	rep, closeRep := s.reporter(env)
	defer closeRep()
	for _, o := range s.fetchBlobs(ctx, env, c, rep, dest, inReg) {
		got, n, rerr := s.recordResults(dest, []fetch.File{o.f}, o.res, rec)
		if o.err == nil {
			o.err = rerr
		}
		if o.err != nil {
			if ctx.Err() != nil {
				return nil, nil, 0, ctx.Err()
			}
			rest = append(rest, o.f)
			if errors.Is(o.err, cache.ErrNotAskedAgain) && gaveUp != nil {
				continue
			}
			if errors.Is(o.err, cache.ErrNotAskedAgain) {
				gaveUp = o.err
			}
			env.Log.Warn("fetching a file from the cache failed; fetching it from the origin", "file", o.f.Path, "err", o.err)
			continue
		}
		fetched, bytes = append(fetched, got...), bytes+n
	}
	if err := env.SaveData(*rec); err != nil {
		return nil, nil, 0, fmt.Errorf("recording verified files: %w", err)
	}
	return rest, fetched, bytes, nil
}

// askCache sorts todo into the files the registry holds as blobs and the rest, left
// for the origin; gaveUp is set once the registry is not to be asked again in this run.
func askCache(ctx context.Context, env *engine.Env, c cache.Cache, todo []fetch.File) (inReg, rest []fetch.File, gaveUp, err error) {
	for _, f := range todo {
		if f.SHA256 == "" || gaveUp != nil {
			rest = append(rest, f)
			continue
		}
		ok, herr := c.HasBlob(ctx, f.SHA256)
		if herr != nil {
			if ctx.Err() != nil {
				return nil, nil, nil, ctx.Err()
			}
			if errors.Is(herr, cache.ErrNotAskedAgain) {
				// Said once for the step, not once per file.
				gaveUp = herr
				env.Log.Warn("the cache is not asked again in this run; every file left comes from the origin", "cache", c.String(), "err", herr)
				rest = append(rest, f)
				continue
			}
			env.Log.Warn("cannot ask the cache for a file; fetching it from the origin", "file", f.Path, "err", herr)
		}
		if !ok {
			rest = append(rest, f)
			continue
		}
		inReg = append(inReg, f)
	}
	return inReg, rest, gaveUp, nil
}

// blobOutcome is what fetching one file from the registry came to.
type blobOutcome struct {
	f   fetch.File
	res []fetch.Result
	err error
}

// fetchBlobs fetches each file of inReg from the registry on its own, FilesAtOnce at a
// time (4 unless set), reporting progress to rep, and returns each file's outcome in
// order.
func (s *Step) fetchBlobs(ctx context.Context, env *engine.Env, c cache.Cache, rep fetch.Reporter, dest string, inReg []fetch.File) []blobOutcome {
	out := make([]blobOutcome, len(inReg))
	at := s.spec.FilesAtOnce
	if at <= 0 {
		at = 4
	}
	sem := make(chan struct{}, at)
	var wg sync.WaitGroup
	for i, f := range inReg {
		reg := f
		reg.URL = c.BlobURL(f.SHA256)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := c.GaveUp(); err != nil {
				// A file before this one stalled: the registry is not asked again.
				out[i] = blobOutcome{f: f, err: err}
				return
			}
			res, ferr := fetch.Fetch(ctx, []fetch.File{reg}, fetch.Options{
				Dest: dest, Files: 1, Conns: s.spec.Connections, ChunkSize: cache.ChunkSize, StallTimeout: s.stall, MinRate: c.MinRate(), MinRateWindow: s.minRateWindow,
				Retries: s.spec.Retries, NoProgress: s.registryNoProgress(), Client: giveUpClient(c), Progress: rep, FreeSpace: s.freeSpace,
				Logf: func(format string, args ...any) { env.Log.Info(redact.Userinfo(fmt.Sprintf(format, args...))) },
			})
			out[i] = blobOutcome{f: f, res: res, err: ferr}
		}()
	}
	wg.Wait()
	return out
}

// originEntries returns the files of todo (entries of the cache's listing, left for the
// origin) as the origin lists them at the listing's commit: one tree listing from the hub.
// An entry the origin lists otherwise (another size or digest) is said and the origin's
// taken; one the origin does not list at all is an error. When the hub cannot be asked,
// the cache's entries stay (the digests still decide what is kept).
func (s *Step) originEntries(ctx context.Context, env *engine.Env, listing *cacheListing, todo []fetch.File) ([]fetch.File, error) {
	c, err := s.hubClient(env, s.spec.Retries)
	if err != nil {
		return nil, err
	}
	listed, err := c.Files(ctx, listing.Repo, listing.Commit, s.spec.HF.Include, s.spec.HF.Exclude)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if unreachable(err) {
			// The hub's host did not answer for the whole network budget: fetching the
			// files from that same host would wait out another budget (no_progress_timeout)
			// before failing the same way.
			return nil, fmt.Errorf("%d files the cache lacks (%s) must come from the hub, which could not be reached within network.retry_for: %w",
				len(todo), fileNames(todo, 5), redact.Error(err))
		}
		env.Log.Warn("cannot read the origin's listing; fetching from the origin with the cache's", "err", redact.Error(err))
		return todo, nil
	}
	byPath := make(map[string]hub.File, len(listed))
	for _, f := range listed {
		byPath[f.Path] = f
	}
	out := make([]fetch.File, 0, len(todo))
	for _, f := range todo {
		o, ok := byPath[f.Path]
		if !ok {
			return nil, fmt.Errorf("the cache's listing names %s, which %s at %s does not have", f.Path, listing.Repo, listing.Commit)
		}
		if o.Size != f.Size || o.SHA256 != "" && o.SHA256 != f.SHA256 || o.SHA256 == "" && o.GitSHA1 != f.GitSHA1 {
			env.Log.Warn("the cache's listing differs from the origin's; taking the origin's", "file", f.Path,
				"cache_size", f.Size, "origin_size", o.Size, "cache_sha256", f.SHA256, "origin_sha256", o.SHA256)
		}
		out = append(out, fetch.File{URL: o.URL, Path: o.Path, Size: o.Size, SHA256: o.SHA256, GitSHA1: o.GitSHA1})
	}
	return out, nil
}

// unreachable reports whether err is a connection that could not be made (refused, no
// route, a name that does not resolve), as against an answer the server gave.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}

// fileNames names up to n of files' paths, and how many more there are.
func fileNames(files []fetch.File, n int) string {
	var names []string
	for i, f := range files {
		if i == n {
			names = append(names, fmt.Sprintf("and %d more", len(files)-n))
			break
		}
		names = append(names, f.Path)
	}
	return strings.Join(names, ", ")
}

// recordResults records each verified file of results (files are what was asked) in rec,
// and returns those that came over the network and their bytes.
func (s *Step) recordResults(dest string, files []fetch.File, results []fetch.Result, rec *record) (fetched []fetch.Result, bytes int64, ferr error) {
	byPath := map[string]fetch.File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	for _, r := range results {
		f, ok := byPath[r.Path]
		if !ok {
			continue
		}
		p := filepath.Join(dest, filepath.FromSlash(r.Path))
		if r.Present {
			// Already there at the expected size but not verified by this run: hash it.
			if err := fetch.VerifyFile(p, f); err != nil {
				if ferr == nil {
					ferr = fmt.Errorf("verifying %s: %w", filepath.Join(s.spec.Dest, r.Path), err)
				}
				continue
			}
		}
		st, err := statOf(p)
		if err != nil {
			if ferr == nil {
				ferr = fmt.Errorf("checking %s: %w", filepath.Join(s.spec.Dest, r.Path), err)
			}
			continue
		}
		if !r.Present {
			// Recorded as verified only from the digest of the bytes the downloader
			// wrote and renamed into place, never from the listing alone.
			if bad := ownDigestDiffers(f, r, st); bad != "" {
				if ferr == nil {
					ferr = fmt.Errorf("%s: %s; run again to download it again", filepath.Join(s.spec.Dest, r.Path), bad)
				}
				continue
			}
		}
		st.SHA256, st.GitSHA1 = f.SHA256, f.GitSHA1
		if r.SHA256 != "" && !r.Present {
			st.SHA256 = r.SHA256
		}
		rec.Files[r.Path] = st
		if !r.Present {
			fetched = append(fetched, r)
			bytes += r.Bytes
		}
	}
	return fetched, bytes, ferr
}

// registryNoProgress is the retry budget of a file taken from the fleet cache: two stall
// timeouts (2 min by default), not the origin's no_progress_timeout. The registry only
// spares the origin; a file it stops serving comes from the origin instead, and the run
// must not wait many minutes on the registry first.
func (s *Step) registryNoProgress() time.Duration {
	d := s.stall
	if d <= 0 {
		d = time.Minute
	}
	d *= 2
	if s.noProgress > 0 {
		d = min(d, s.noProgress)
	}
	return d
}

// giveUpClient is the cache's HTTP client whose requests fail at once, not to be retried
// (fetch.ErrNoRetry), once the cache is given up for the run (it stalled or did not answer).
func giveUpClient(c cache.Cache) *http.Client {
	hc := *c.HTTPClient()
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = giveUpTransport{base: base, c: c}
	return &hc
}

type giveUpTransport struct {
	base http.RoundTripper
	c    cache.Cache
}

func (t giveUpTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.c.GaveUp(); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %w", fetch.ErrNoRetry, err)
	}
	return t.base.RoundTrip(req)
}

// Publish pushes every file the step verified as a blob whose digest is its sha256 (the
// files the hub keeps in git, without one, are hashed first), and the resolved listing as
// the artifact's config, tagged with the step's fingerprint.
func (s *Step) Publish(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	rec, ok := s.loadRecord(env)
	if !ok || len(rec.Expected) == 0 {
		return "", nil
	}
	dest := s.root(env, rec.Commit)
	l := cacheListing{Repo: rec.Repo, Revision: rec.Revision, Commit: rec.Commit}
	var files []cache.File
	for _, rel := range rec.Expected {
		fr, ok := rec.Files[rel]
		if !ok {
			return "", fmt.Errorf("%s was not verified", rel)
		}
		p := filepath.Join(dest, filepath.FromSlash(rel))
		sum, size := fr.SHA256, fr.Size
		if sum == "" {
			var err error
			if sum, size, err = cache.FileSHA256(p); err != nil {
				return "", err
			}
		}
		l.Files = append(l.Files, listedFile{Path: rel, Size: size, SHA256: sum, GitSHA1: fr.GitSHA1})
		files = append(files, cache.File{Name: rel, Path: p, Size: size, SHA256: sum, Mode: 0o644})
	}
	meta, err := json.Marshal(l)
	if err != nil {
		return "", fmt.Errorf("encoding the listing: %w", err)
	}
	ctx = cache.WithAnnotations(ctx, map[string]string{
		cache.AnnotationModel: rec.Repo, cache.AnnotationRevision: rec.Revision, cache.AnnotationModelCommit: rec.Commit,
	})
	a, err := slot.Cache.Push(ctx, slot.Tag, cache.KindDownload, meta, files)
	if err != nil {
		return "", err
	}
	return a.Digest, nil
}
