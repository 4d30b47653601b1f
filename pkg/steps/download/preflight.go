package download

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/hub"
	"github.com/sglprov/sglprov/pkg/ownership"
)

// preflightTimeout bounds plan's hub requests.
const preflightTimeout = 30 * time.Second

// Preflight says how many bytes are still to fetch into dest and how much space is free
// there: "to fetch: 221.4 GiB of 223.1 GiB (97 files); free at /var/lib/sglprov/models:
// 1.7 TiB". The sizes come from the hub's listing at the pinned revision (or the recipe's
// files); when the hub cannot be reached now they are "unknown", which is not the recipe's
// fault and no error. Three answers are errors that make plan exit 4 rather than promise a
// download that cannot happen: the hub says the revision does not exist (RevisionNotFound;
// a commit too, which the fingerprint takes on trust; exitcode.ErrMissing), the hub refuses
// the files to this host (a gated or private repository without a token that has access:
// the API answers, resolve refuses; exitcode.ErrHost, with the cause and the fix), or the
// bytes still to fetch do not fit (exitcode.ErrHost). apply refuses the latter too, before the first byte.
// With the fleet cache in slot it takes the listing, as apply does, from the artifact tagged
// slot.Tag when the cache has one that fits the step (the same checks), and asks the hub
// otherwise, so that a node whose hub is out of reach still says what is left to fetch.
// need is the file system of dest (the device of its nearest existing folder), the bytes
// and the free space, so that plan can add up downloads whose dests share a file system;
// nil when either is unknown.
func (s *Step) Preflight(ctx context.Context, env *engine.Env, slot engine.CacheSlot) ([]string, *engine.DiskNeed, error) {
	dest := env.Path(s.spec.Dest)
	if err := ownership.CheckDest(env.Root, "dest", dest); err != nil {
		return nil, nil, err
	}
	free, checked, ferr := fetch.FreeSpace(dest)
	if s.freeSpace != nil && ferr == nil {
		free, ferr = s.freeSpace(checked)
	}
	freeText := "unknown"
	if ferr == nil {
		freeText = fetch.FormatBytes(int64(free))
	}
	where := fmt.Sprintf("free at %s: %s", s.spec.Dest, freeText)

	files, total, commit, err := s.listForPlan(ctx, env, slot)
	if errors.Is(err, exitcode.ErrMissing) || errors.Is(err, exitcode.ErrHost) {
		return []string{"to fetch: unknown; " + where}, nil, err
	}
	if err != nil {
		return []string{"to fetch: unknown (" + err.Error() + "); " + where}, nil, nil
	}
	need, unknown, err := fetch.Remaining(s.root(env, commit), files)
	if err != nil {
		return []string{"to fetch: unknown (" + err.Error() + "); " + where}, nil, nil
	}
	line := fmt.Sprintf("to fetch: %s of %s (%d files", fetch.FormatBytes(int64(need)), fetch.FormatBytes(total), len(files))
	if unknown > 0 {
		line += fmt.Sprintf(", %d of unknown size", unknown)
	}
	line += "); " + where
	if ferr != nil {
		return []string{line}, nil, nil
	}
	var dn *engine.DiskNeed
	if fs, err := fetch.FileSystemID(dest); err == nil {
		dn = &engine.DiskNeed{FS: fs, Dir: s.spec.Dest, Need: need, Free: free}
	}
	if need > free {
		return []string{line}, dn, fmt.Errorf("%w: not enough free space at %s: %s to fetch, %s free",
			exitcode.ErrHost, s.spec.Dest, fetch.FormatBytes(int64(need)), fetch.FormatBytes(int64(free)))
	}
	return []string{line}, dn, nil
}

// listForPlan returns the files the step would fetch and their total size, from the fleet
// cache's listing (slot, as apply takes it), the hub's listing at the revision (one resolve,
// one listing and a HEAD of the first file's resolve URL, no retries) or the recipe's
// files. A revision the hub says does not exist is an error marked exitcode.ErrMissing, a
// file the hub refuses to this host (gated, private, a token without access: 401, 403)
// one marked exitcode.ErrHost (exit 4 both).
func (s *Step) listForPlan(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (files []fetch.File, total int64, commit string, err error) {
	if s.spec.HF == nil {
		for _, f := range s.spec.Files {
			size := f.Size
			if size == 0 {
				size = -1
			}
			files = append(files, fetch.File{URL: f.URL, Path: f.Path, Size: size, SHA256: f.SHA256})
			total += max(size, 0)
		}
		return files, total, "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	if hub.Offline(s.getenv) {
		// HF_HUB_OFFLINE: what the last run recorded, and no request to the hub.
		rec, ok := s.loadRecord(env)
		if !ok || rec.Repo != s.spec.HF.Repo || rec.Revision != s.revision() || len(rec.Expected) == 0 {
			return nil, 0, "", errors.New("HF_HUB_OFFLINE is set and no earlier run recorded the listing")
		}
		for _, p := range rec.Expected {
			fr := rec.Files[p]
			files = append(files, fetch.File{Path: p, Size: fr.Size, SHA256: fr.SHA256, GitSHA1: fr.GitSHA1})
			total += fr.Size
		}
		return files, total, rec.Commit, nil
	}
	if a := s.lookupListing(ctx, env, slot); a != nil {
		if l := s.listingFrom(env, a); l != nil {
			for _, f := range l.Files {
				files = append(files, fetch.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256, GitSHA1: f.GitSHA1})
				total += f.Size
			}
			return files, total, l.Commit, nil
		}
	}
	c, err := s.hubClient(env, -1)
	if err != nil {
		return nil, 0, "", err
	}
	rev := s.revision()
	commit, err = c.ResolveRevision(ctx, s.spec.HF.Repo, rev)
	var api *hub.APIError
	if errors.As(err, &api) && api.Code == "RevisionNotFound" {
		return nil, 0, "", fmt.Errorf("%w: the hub has no revision %q of %s: %w", exitcode.ErrMissing, rev, s.spec.HF.Repo, err)
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("hub not reachable: %w", err)
	}
	listed, err := c.Files(ctx, s.spec.HF.Repo, commit, s.spec.HF.Include, s.spec.HF.Exclude)
	if err != nil {
		return nil, 0, "", fmt.Errorf("hub not reachable: %w", err)
	}
	for _, f := range listed {
		files = append(files, fetch.File{URL: f.URL, Path: f.Path, Size: f.Size, SHA256: f.SHA256, GitSHA1: f.GitSHA1})
		total += max(f.Size, 0)
	}
	// The hub answers the API of a gated or private repository to anyone and refuses only
	// the files: ask for one as the download will, so that a missing licence or token
	// stops plan now rather than the download after an hour of kernel build.
	if len(listed) > 0 {
		perr := c.Probe(ctx, s.spec.HF.Repo, commit, listed[0].URL)
		if errors.As(perr, &api) && hub.Refused(api.Status, api.Code) {
			return nil, 0, "", fmt.Errorf("%w: the hub refuses the files of %s to this host: %w", exitcode.ErrHost, s.spec.HF.Repo, perr)
		}
		if perr != nil {
			return nil, 0, "", fmt.Errorf("hub not reachable: %w", perr)
		}
	}
	return files, total, commit, nil
}
