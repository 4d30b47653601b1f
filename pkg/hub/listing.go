// Listing: a repository's files at a commit, from the paginated tree API, or from the
// model info's siblings and a HEAD of each file where the tree API is not served.

package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/sglprov/sglprov/pkg/redact"
)

// LFS is the large-file metadata of a tree entry.
type LFS struct {
	// OID is the file's sha256, hex.
	OID string `json:"oid"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// PointerSize is the size of the git pointer file.
	PointerSize int64 `json:"pointerSize"`
}

// Entry is one item of a tree listing.
type Entry struct {
	// Type is "file" or "directory".
	Type string `json:"type"`
	// Path is the item's path in the repository.
	Path string `json:"path"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// OID is the git object id (for a file, its blob sha1; for an LFS file, the pointer's).
	OID string `json:"oid"`
	// LFS is set for files stored in LFS.
	LFS *LFS `json:"lfs,omitempty"`
}

// MaxTreeEntries is the most entries a tree listing may have (the hub advises at most
// 100,000 files per repository); MaxTreePages the most pages read for one: a next-page
// link past either, or one already followed, fails the listing, naming the endpoint.
const (
	MaxTreeEntries = 200_000
	MaxTreePages   = 1_000
)

// ListTree lists every entry of repo at commit, following the listing's pagination
// (bounded by MaxTreePages and MaxTreeEntries).
func (c *Client) ListTree(ctx context.Context, repo, commit string) ([]Entry, error) {
	if err := CheckRepo(repo); err != nil {
		return nil, err
	}
	next := c.Endpoint() + "/api/models/" + repo + "/tree/" + url.PathEscape(commit) + "?recursive=true"
	var all []Entry
	seen := map[string]bool{}
	for pages := 0; next != ""; pages++ {
		if seen[next] {
			return nil, fmt.Errorf("listing files of %s at %s: the endpoint %s names a next page it already gave (%s): its pagination loops; fix or replace the mirror (hf.endpoint, HF_ENDPOINT)", repo, commit, c.shownEndpoint(), redact.URL(next))
		}
		if pages >= MaxTreePages || len(all) > MaxTreeEntries {
			return nil, fmt.Errorf("listing files of %s at %s: the endpoint %s still names a next page after %d pages and %d entries (at most %d pages or %d files are read): its pagination does not end; fix or replace the mirror (hf.endpoint, HF_ENDPOINT)",
				repo, commit, c.shownEndpoint(), pages, len(all), MaxTreePages, MaxTreeEntries)
		}
		seen[next] = true
		var page []Entry
		var hdr http.Header
		if err := c.getJSON(ctx, next, repo, commit, &page, &hdr); err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		all = append(all, page...)
		n, err := nextLink(hdr, next)
		if err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		if n != "" {
			if n, err = c.onEndpoint(n, "/api/models/"+repo+"/tree/"); err != nil {
				return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
			}
		}
		next = n
	}
	return all, nil
}

// onEndpoint returns a next-page link as it is followed: on the endpoint's own scheme and
// host as it stands; a link that names another host (a mirror that passes on its
// upstream's links) is taken onto the endpoint, its path under the endpoint's path, never
// followed elsewhere (nor is the token sent there). The path must lie under wantPath.
func (c *Client) onEndpoint(link, wantPath string) (string, error) {
	u, err := url.Parse(link)
	if err != nil {
		return "", fmt.Errorf("parsing next-page link: %w", err)
	}
	ep := c.endpoint
	if u.Scheme == ep.Scheme && u.Host == ep.Host {
		if !strings.HasPrefix(u.Path, ep.Path+wantPath) {
			return "", fmt.Errorf("next-page link %s leaves the listing", redact.URL(link))
		}
		return link, nil
	}
	p := u.Path
	if ep.Path != "" && strings.HasPrefix(p, ep.Path+"/") {
		p = strings.TrimPrefix(p, ep.Path)
	}
	if !strings.HasPrefix(p, wantPath) {
		return "", fmt.Errorf("next-page link %s names another host and leaves the listing", redact.URL(link))
	}
	onto := *ep
	onto.Path = ep.Path + p
	onto.RawPath = ""
	onto.RawQuery = u.RawQuery
	return onto.String(), nil
}

// File is a file to download from the hub.
type File struct {
	// Path is the file's path in the repository and under the destination.
	Path string
	// URL is its resolve URL at the commit.
	URL string
	// Size is its size in bytes.
	Size int64
	// SHA256 is its sha256 (hex) for LFS files, "" otherwise.
	SHA256 string
	// GitSHA1 is its git blob sha1 (hex) for files not in LFS, "" otherwise.
	GitSHA1 string
}

// Files lists the files of repo at commit that match include (all when empty) and no
// pattern of exclude. Every name is checked with CheckName.
func (c *Client) Files(ctx context.Context, repo, commit string, include, exclude []string) ([]File, error) {
	if err := CheckPatterns(include); err != nil {
		return nil, err
	}
	if err := CheckPatterns(exclude); err != nil {
		return nil, err
	}
	entries, err := c.ListTree(ctx, repo, commit)
	if noTree(err) {
		return c.filesFromSiblings(ctx, repo, commit, include, exclude, err)
	}
	if err != nil {
		return nil, err
	}
	var files []File
	dup := map[string]bool{}
	for _, e := range entries {
		if e.Type != "file" {
			continue
		}
		if err := CheckName(e.Path); err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		if dup[e.Path] {
			return nil, fmt.Errorf("listing files of %s at %s: %q listed twice", repo, commit, e.Path)
		}
		dup[e.Path] = true
		if len(include) > 0 && !Match(include, e.Path) {
			continue
		}
		if Match(exclude, e.Path) {
			continue
		}
		f := File{Path: e.Path, URL: c.ResolveURL(repo, commit, e.Path), Size: e.Size}
		if e.LFS != nil {
			if !hexOf(e.LFS.OID, 64) {
				return nil, fmt.Errorf("listing files of %s at %s: %q has LFS oid %q, want a sha256", repo, commit, e.Path, e.LFS.OID)
			}
			f.SHA256 = e.LFS.OID
			if e.LFS.Size > 0 {
				f.Size = e.LFS.Size
			}
		} else {
			if !hexOf(e.OID, 40) {
				return nil, fmt.Errorf("listing files of %s at %s: %q has oid %q, want a git sha1", repo, commit, e.Path, e.OID)
			}
			f.GitSHA1 = e.OID
		}
		files = append(files, f)
	}
	return files, nil
}

// noTree reports whether a listing failed because the endpoint does not serve the tree API
// (a mirror: 404, 405 or 501 without the hub's X-Error-Code), not because the hub said the
// repository or revision does not exist.
func noTree(err error) bool {
	var api *APIError
	if !errors.As(err, &api) || api.Code != "" {
		return false
	}
	return api.Status == http.StatusNotFound || api.Status == http.StatusMethodNotAllowed || api.Status == http.StatusNotImplemented
}

// headWorkers is how many HEAD requests filesFromSiblings makes at once.
const headWorkers = 8

// filesFromSiblings lists the files of repo at commit as huggingface_hub does where there
// is no tree API: the names from the revision's siblings, and for each file that include
// and exclude keep, a HEAD of its resolve URL (the redirect not followed): X-Linked-Etag
// is an LFS file's sha256 and X-Linked-Size its size; a file kept in git has its blob
// sha1 as ETag and its size as Content-Length.
func (c *Client) filesFromSiblings(ctx context.Context, repo, commit string, include, exclude []string, treeErr error) ([]File, error) {
	u := c.Endpoint() + "/api/models/" + repo + "/revision/" + url.PathEscape(commit)
	var info struct {
		Siblings []struct {
			RFilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := c.getJSON(ctx, u, repo, commit, &info, nil); err != nil {
		return nil, fmt.Errorf("listing files of %s at %s: no tree listing (%v), and the revision's siblings: %w", repo, commit, treeErr, err)
	}
	var files []File
	dup := map[string]bool{}
	for _, sib := range info.Siblings {
		name := sib.RFilename
		if err := CheckName(name); err != nil {
			return nil, fmt.Errorf("listing files of %s at %s: %w", repo, commit, err)
		}
		if dup[name] {
			return nil, fmt.Errorf("listing files of %s at %s: %q listed twice", repo, commit, name)
		}
		dup[name] = true
		if (len(include) > 0 && !Match(include, name)) || Match(exclude, name) {
			continue
		}
		files = append(files, File{Path: name, URL: c.ResolveURL(repo, commit, name)})
	}
	errs := make([]error, len(files))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(headWorkers, len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs[i] = c.retry(ctx, "hub HEAD of "+redact.URL(files[i].URL), func() (bool, error) { return c.headFile(ctx, repo, commit, &files[i]) })
			}
		}()
	}
	for i := range files {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("listing files of %s at %s from the revision's siblings: %w", repo, commit, err)
	}
	return files, nil
}

// nextLink returns the rel="next" target of a Link header, resolved against the page URL.
func nextLink(h http.Header, page string) (string, error) {
	for _, v := range h.Values("Link") {
		for _, link := range strings.Split(v, ",") {
			link = strings.TrimSpace(link)
			if !strings.HasPrefix(link, "<") {
				continue
			}
			end := strings.Index(link, ">")
			if end < 0 {
				continue
			}
			target := link[1:end]
			isNext := false
			for _, param := range strings.Split(link[end+1:], ";") {
				param = strings.TrimSpace(param)
				if k, v, ok := strings.Cut(param, "="); ok && strings.EqualFold(strings.TrimSpace(k), "rel") {
					for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"`)) {
						if strings.EqualFold(rel, "next") {
							isNext = true
						}
					}
				}
			}
			if !isNext {
				continue
			}
			base, err := url.Parse(page)
			if err != nil {
				return "", fmt.Errorf("parsing page URL: %w", err)
			}
			ref, err := url.Parse(target)
			if err != nil {
				return "", fmt.Errorf("parsing next-page link %q: %w", target, err)
			}
			return base.ResolveReference(ref).String(), nil
		}
	}
	return "", nil
}
