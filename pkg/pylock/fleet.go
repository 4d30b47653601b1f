package pylock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/fetch"
)

// Kind is the artifact type of a lock in the fleet cache: the lock as the config, the
// wheels as layers (blobs by their sha256).
const Kind = "application/vnd.sglprov.python.v1"

// Collect downloads the wheel of each package of l that dir lacks from the URL the lock
// records (the index the resolving node used), its sha256 checked, into dir.
func Collect(ctx context.Context, l *Lock, dir string, opt fetch.Options) error {
	missing, err := VerifyWheels(l, dir)
	if err != nil {
		return err
	}
	var files []fetch.File
	for _, p := range missing {
		if p.URL == "" {
			return fmt.Errorf("collecting the wheels: the lock records no URL for %s", p.Wheel)
		}
		files = append(files, fetch.File{URL: p.URL, Path: p.Wheel, Size: -1, SHA256: p.SHA256})
	}
	if len(files) == 0 {
		return nil
	}
	opt.Dest = dir
	if _, err := fetch.Fetch(ctx, files, opt); err != nil {
		return fmt.Errorf("collecting the wheels: %w", err)
	}
	return nil
}

// Publish pushes l and its wheels (all in dir, each checked against the lock first) to the
// fleet cache as one artifact tagged tag: the lock as its config, each wheel a layer whose
// blob digest is its sha256.
func Publish(ctx context.Context, c cache.Cache, tag string, l *Lock, dir string) (*cache.Artifact, error) {
	missing, err := VerifyWheels(l, dir)
	if err != nil {
		return nil, fmt.Errorf("publishing the lock: %w", err)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("publishing the lock: %s lacks %d wheels (%s first)", dir, len(missing), missing[0].Wheel)
	}
	meta, err := l.Encode()
	if err != nil {
		return nil, err
	}
	files := make([]cache.File, 0, len(l.Packages))
	for _, p := range l.Packages {
		fp := filepath.Join(dir, p.Wheel)
		fi, err := os.Stat(fp)
		if err != nil {
			return nil, fmt.Errorf("publishing the lock: %w", err)
		}
		files = append(files, cache.File{Name: p.Wheel, Path: fp, Size: fi.Size(), SHA256: p.SHA256, Mode: 0o644})
	}
	a, err := c.Push(ctx, tag, Kind, meta, files)
	if err != nil {
		return nil, fmt.Errorf("publishing the lock: %w", err)
	}
	return a, nil
}

// FromCache looks up the lock tagged tag in the fleet cache and pulls its wheels into dir.
// It returns the lock and its artifact, or nils when the cache holds none. An artifact whose layers are not the
// lock's wheels (a name or a digest that differs) is refused with both digests named.
func FromCache(ctx context.Context, c cache.Cache, tag, dir string) (*Lock, *cache.Artifact, error) {
	a, err := c.Lookup(ctx, tag)
	if err != nil || a == nil {
		return nil, nil, err
	}
	if a.Kind != Kind {
		return nil, nil, fmt.Errorf("the artifact %s is a %s, not a Python lock", a.Digest, a.Kind)
	}
	l, err := Parse(a.Meta, "in "+a.Digest)
	if err != nil {
		return nil, nil, err
	}
	byWheel := map[string]Package{}
	for _, p := range l.Packages {
		byWheel[p.Wheel] = p
	}
	if len(a.Files) != len(l.Packages) {
		return nil, nil, fmt.Errorf("the artifact %s holds %d wheels, its lock %d", a.Digest, len(a.Files), len(l.Packages))
	}
	for _, f := range a.Files {
		p, ok := byWheel[f.Name]
		if !ok {
			return nil, nil, fmt.Errorf("the artifact %s holds %s, which its lock does not name", a.Digest, f.Name)
		}
		if f.SHA256 != p.SHA256 {
			return nil, nil, &MismatchError{Wheel: f.Name, Want: p.SHA256, Got: f.SHA256}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("pulling the lock's wheels: %w", err)
	}
	if err := c.Pull(ctx, a, dir); err != nil {
		return nil, nil, fmt.Errorf("pulling the lock's wheels: %w", err)
	}
	return l, a, nil
}
