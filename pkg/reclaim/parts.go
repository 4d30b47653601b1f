package reclaim

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/ownership"
)

// recordedFolder reports whether the folder at o.Path is the one its record was written for
// (its device and inode; a record without them names no folder sglprov wrote into).
func recordedFolder(o Owned) bool {
	if o.Ino == 0 {
		return false // no list of sglprov's: nothing there is its to free
	}
	dev, ino := ownership.Identify(o.Path)
	return dev == o.Dev && ino == o.Ino
}

// freeParts frees the part files parts (relative to the weights folder of o) with their
// resume records (fetch.FreePartAt), then the part-file folders left empty. The folder is
// opened once and checked to be the one o records (device and inode), and everything below
// it is reached through that handle, one folder at a time without following a link: a part
// that lies behind a link, or that is not a part file inside a part-file folder
// (fetch.WorkDir), is not touched. A part a running download holds is left (inUse, its host
// path). It returns the bytes freed (with dryRun: that would be).
func freeParts(o Owned, parts []string, dryRun bool) (freed int64, inUse []string, err error) {
	dirfd, ok, err := ownership.OpenFolder(o.Path, o.Dev, o.Ino)
	if err != nil {
		return 0, nil, fmt.Errorf("opening %s: %w", o.Path, err)
	}
	if !ok {
		return 0, nil, nil // gone, or not the folder sglprov downloaded into
	}
	defer unix.Close(dirfd)
	var errs []error
	parts = slices.Clone(parts)
	slices.Sort(parts)
	for _, rel := range slices.Compact(parts) { // several records may name one part
		if !isPartFile(rel) {
			continue
		}
		host := filepath.Join(o.Path, filepath.FromSlash(rel))
		n, held, err := freePart(dirfd, rel, host, dryRun)
		switch {
		case err != nil:
			errs = append(errs, err)
		case held:
			inUse = append(inUse, host)
		default:
			freed += n
		}
	}
	return freed, inUse, errors.Join(errs...)
}

// isPartFile reports whether rel names a part file inside a part-file folder (fetch.WorkDir),
// as a clean relative path.
func isPartFile(rel string) bool {
	return strings.HasSuffix(rel, ".part") && slices.Contains(strings.Split(rel, "/"), fetch.WorkDir) && localRel(rel)
}

// freePart frees the part file rel below the folder dirfd (host is its host path), and then
// the part-file folders it leaves empty, up to the one named fetch.WorkDir. A part behind a
// link, or not there, frees nothing; held says a running download holds it.
func freePart(dirfd int, rel, host string, dryRun bool) (n int64, held bool, err error) {
	sub, ok, err := ownership.OpenUnder(dirfd, path.Dir(rel))
	if err != nil {
		return 0, false, fmt.Errorf("opening the folder of %s: %w", host, err)
	}
	if !ok {
		return 0, false, nil // not there, or a folder on the way is a link
	}
	n, held, err = fetch.FreePartAt(sub, path.Base(rel), host, dryRun)
	unix.Close(sub)
	if err != nil || held || dryRun {
		return n, held, err
	}
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		if !ownership.RemoveEmptyUnder(dirfd, d) || path.Base(d) == fetch.WorkDir {
			break
		}
	}
	return n, false, nil
}

// localRel reports whether rel is a clean relative '/'-separated path inside its folder.
func localRel(rel string) bool {
	return rel != "" && path.Clean(rel) == rel && !path.IsAbs(rel) && rel != ".." && !strings.HasPrefix(rel, "../")
}
