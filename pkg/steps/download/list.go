// The listing: the files to have at dest and where each comes from, from one of four
// sources: the fleet cache's recorded listing, the last run's record (HF_HUB_OFFLINE), the
// hub at the resolved commit, or the recipe's URLs.

package download

import (
	"context"
	"fmt"
	"strings"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/hub"
)

// list returns the files of this run and records the repository, revision and commit
// they were listed at in rec; hubc is the hub's client the files are fetched with (nil
// for the recipe's URLs and for an offline run). listing is the fleet cache's, or nil.
func (s *Step) list(ctx context.Context, env *engine.Env, artifact *cache.Artifact, listing *cacheListing, rec *record) (files []fetch.File, hubc *hub.Client, err error) {
	switch {
	case s.spec.HF != nil && listing != nil:
		return s.listFromCache(env, artifact, listing, rec)
	case s.spec.HF != nil && hub.Offline(s.getenv):
		files, err := s.listOffline(env, rec)
		return files, nil, err
	case s.spec.HF != nil:
		return s.listFromHub(ctx, env, rec)
	default:
		return s.listRecipe(), nil, nil
	}
}

// listFromCache lists the files the fleet cache's listing names, at the resolved
// commit: no hub request at all.
func (s *Step) listFromCache(env *engine.Env, artifact *cache.Artifact, listing *cacheListing, rec *record) ([]fetch.File, *hub.Client, error) {
	var files []fetch.File
	c, err := s.hubClient(env, s.spec.Retries)
	if err != nil {
		return nil, nil, err
	}
	env.Log.Info("listing taken from the cache", "artifact", artifact.Digest, "commit", listing.Commit, "files", len(listing.Files))
	env.Detail("commit", listing.Commit)
	for _, f := range listing.Files {
		files = append(files, fetch.File{URL: c.ResolveURL(listing.Repo, listing.Commit, f.Path), Path: f.Path, Size: f.Size, SHA256: f.SHA256, GitSHA1: f.GitSHA1})
	}
	rec.Repo, rec.Revision, rec.Commit = listing.Repo, listing.Revision, listing.Commit
	return files, c, nil
}

// listOffline lists, under HF_HUB_OFFLINE, the files recorded by the last run, and makes
// no request to the hub; it refuses when a file was never downloaded.
func (s *Step) listOffline(env *engine.Env, rec *record) ([]fetch.File, error) {
	var files []fetch.File
	old, ok := s.loadRecord(env)
	rev := s.revision()
	if !ok || old.Repo != s.spec.HF.Repo || old.Revision != rev || old.Commit == "" || len(old.Expected) == 0 {
		return nil, fmt.Errorf("%w: HF_HUB_OFFLINE is set and no earlier run recorded the files of %s at %q: unset HF_HUB_OFFLINE for one run with the hub in reach", exitcode.ErrHost, s.spec.HF.Repo, rev)
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
		return nil, fmt.Errorf("%w: HF_HUB_OFFLINE is set and %d files of %s were never downloaded (%s): unset HF_HUB_OFFLINE to fetch them", exitcode.ErrHost, len(missing), s.spec.HF.Repo, strings.Join(missing, ", "))
	}
	env.Log.Info("HF_HUB_OFFLINE: the recorded listing, no hub request", "commit", old.Commit, "files", len(files))
	env.Detail("commit", old.Commit)
	rec.Repo, rec.Revision, rec.Commit = old.Repo, old.Revision, old.Commit
	return files, nil
}

// listFromHub resolves the revision to a commit and lists the files of the repository
// there that hf.include and hf.exclude select.
func (s *Step) listFromHub(ctx context.Context, env *engine.Env, rec *record) ([]fetch.File, *hub.Client, error) {
	var files []fetch.File
	c, err := s.hubClient(env, s.spec.Retries)
	if err != nil {
		return nil, nil, err
	}
	rev := s.revision()
	commit, err := c.ResolveRevision(ctx, s.spec.HF.Repo, rev)
	if err != nil {
		return nil, nil, err
	}
	if commit != rev {
		env.Log.Info("resolved revision", "repo", s.spec.HF.Repo, "revision", rev, "commit", commit)
	}
	env.Detail("commit", commit)
	listed, err := c.Files(ctx, s.spec.HF.Repo, commit, s.spec.HF.Include, s.spec.HF.Exclude)
	if err != nil {
		return nil, nil, err
	}
	if len(listed) == 0 {
		return nil, nil, fmt.Errorf("no file of %s at %s matches include %q and exclude %q", s.spec.HF.Repo, commit, s.spec.HF.Include, s.spec.HF.Exclude)
	}
	for _, f := range listed {
		if err := checkNotWorkDir(f.Path); err != nil {
			return nil, nil, fmt.Errorf("the listing of %s at %s: %w; leave it out with hf.exclude", s.spec.HF.Repo, commit, err)
		}
		files = append(files, fetch.File{URL: f.URL, Path: f.Path, Size: f.Size, SHA256: f.SHA256, GitSHA1: f.GitSHA1})
	}
	rec.Repo, rec.Revision, rec.Commit = s.spec.HF.Repo, rev, commit
	return files, c, nil
}

// listRecipe lists the recipe's files (an unknown size is -1).
func (s *Step) listRecipe() []fetch.File {
	var files []fetch.File
	for _, f := range s.spec.Files {
		size := f.Size
		if size == 0 {
			size = -1
		}
		files = append(files, fetch.File{URL: f.URL, Path: f.Path, Size: size, SHA256: f.SHA256})
	}
	return files
}
