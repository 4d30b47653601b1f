// What is at dest checked: each listed file kept when its record or its digest vouches for
// it, a downloaded file's result against the bytes at its path, and the safetensors
// headers and index once all are there.

package download

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/safetensors"
)

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
// a file present otherwise is hashed: kept and recorded when it matches. One that differs is
// deleted and downloaded again only when sglprov wrote it (the manifest lists it); any other
// is left as it is and the step fails with a NotListedError naming it and the fix.
func (s *Step) sortOut(ctx context.Context, env *engine.Env, dest string, files []fetch.File, rec *record) (todo []fetch.File, kept int, err error) {
	var notOurs []string // files present that differ and that sglprov did not write
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
		if !rec.Owned.Listed || !slices.Contains(rec.Owned.Wrote, s.topRel(rec.Commit, f.Path)) {
			// Not a file sglprov wrote (a user's, another tool's): it is not deleted.
			notOurs = append(notOurs, fmt.Sprintf("%s (%s %s, the listing's %s)", shown, mm.What, mm.Actual, mm.Expected))
			continue
		}
		env.Log.Warn("file differs from the source; downloading it again", "file", shown, "what", mm.What)
		delete(rec.Files, f.Path)
		if err := os.Remove(p); err != nil {
			return nil, 0, fmt.Errorf("removing %s: %w", shown, err)
		}
		todo = append(todo, f)
	}
	if len(notOurs) > 0 {
		return nil, 0, &NotListedError{Files: notOurs}
	}
	return todo, kept, nil
}

// NotListedError is a download's refusal to replace files at dest that are not the listed
// files and that sglprov did not write (a user's copy, another version): they are never
// deleted, and the operator moves them away or deletes them.
type NotListedError struct {
	// Files are the files, each with the digest or size found and the listing's.
	Files []string
}

// Error names each file and the fix.
func (e *NotListedError) Error() string {
	what, it := "exists and is not the listed file", "it"
	if len(e.Files) > 1 {
		what, it = "exist and are not the listed files", "them"
	}
	return fmt.Sprintf("%s %s; sglprov did not write %s, so it does not delete %s: move %s away or delete %s, then apply again",
		strings.Join(e.Files, ", "), what, it, it, it, it)
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
