package download

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fetch"
)

// Layouts of a download's dest.
const (
	// LayoutFiles puts each file at dest/PATH (the default).
	LayoutFiles = "files"
	// LayoutHFCache lays the repository out in dest as huggingface_hub's cache does, so
	// that tools that take a repository id (huggingface-cli, transformers, SGLang with
	// HF_HUB_CACHE=dest or HF_HOME=dest/..) find the weights without a second download:
	// dest/models--ORG--NAME/blobs/ETAG holds each file's bytes (ETAG: its sha256 for an
	// LFS file, its git blob sha1 otherwise), dest/models--ORG--NAME/snapshots/COMMIT/PATH
	// is a relative symbolic link to its blob, and dest/models--ORG--NAME/refs/REVISION
	// holds the commit a branch or tag named (no trailing newline).
	LayoutHFCache = "hf-cache"
)

// hfCache reports whether the step writes huggingface_hub's cache layout.
func (s *Step) hfCache() bool { return s.spec.Layout == LayoutHFCache && s.spec.HF != nil }

// repoFolder is huggingface_hub's folder name of a model repository: "models--ORG--NAME".
func repoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// root returns the folder the files' paths are relative to: dest, or with the hf-cache
// layout the snapshot folder of commit (whose files are links to the blobs).
func (s *Step) root(env *engine.Env, commit string) string {
	dest := env.Path(s.spec.Dest)
	if !s.hfCache() {
		return dest
	}
	return filepath.Join(dest, repoFolder(s.spec.HF.Repo), "snapshots", commit)
}

// shownRoot is root as log lines and errors show it (the recipe's dest, not resolved).
func (s *Step) shownRoot(commit string) string {
	if !s.hfCache() {
		return s.spec.Dest
	}
	return filepath.Join(s.spec.Dest, repoFolder(s.spec.HF.Repo), "snapshots", commit)
}

// etag is the name of f's blob: its sha256, or its git blob sha1 for a file kept in git.
func etag(f fetch.File) string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.GitSHA1
}

// blobLink returns the relative link target from the snapshot entry of rel to its blob.
func blobLink(rel, name string) string {
	up := strings.Repeat("../", 2+strings.Count(rel, "/"))
	return up + "blobs/" + name
}

// relink restores the snapshot links of files whose blob is already there (a link that
// was removed, or a second commit that shares blobs with the first), so that they are not
// downloaded again; sortOut then checks each one as for a plain file.
// note is told the path, relative to dest, of each link it makes.
func (s *Step) relink(root string, files []fetch.File, note func(string)) error {
	blobs := filepath.Join(filepath.Dir(filepath.Dir(root)), "blobs")
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.Path))
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if st, err := os.Stat(filepath.Join(blobs, etag(f))); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("creating the snapshot folder of %s: %w", f.Path, err)
		}
		if err := os.Symlink(blobLink(f.Path, etag(f)), p); err != nil {
			return fmt.Errorf("linking %s to its blob: %w", f.Path, err)
		}
		note(s.topRel(filepath.Base(root), f.Path))
	}
	return nil
}

// toBlobs turns the snapshot's verified files into huggingface_hub's layout: each regular
// file (as the downloader or the fleet cache wrote it) moves to blobs/ETAG (the same inode,
// so its record still holds) and a relative link takes its place; a second file with the
// same content is replaced by a link to the blob that is there. Then refs/REVISION is
// written when rev is a branch or tag. note is told the path, relative to dest, of each
// blob, link and ref it writes.
func (s *Step) toBlobs(root string, files []fetch.File, rev, commit string, note func(string)) error {
	repo := repoFolder(s.spec.HF.Repo)
	repoDir := filepath.Dir(filepath.Dir(root))
	blobs := filepath.Join(repoDir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", blobs, err)
	}
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.Path))
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("checking %s: %w", p, err)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		blob := filepath.Join(blobs, etag(f))
		if bst, err := os.Stat(blob); err == nil && bst.Mode().IsRegular() && bst.Size() == st.Size() && fetch.VerifyFile(blob, f) == nil {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("removing %s: %w", p, err)
			}
		} else if err := os.Rename(p, blob); err != nil {
			return fmt.Errorf("moving %s to its blob: %w", p, err)
		} else {
			note(path.Join(repo, "blobs", etag(f)))
		}
		if err := os.Symlink(blobLink(f.Path, etag(f)), p); err != nil {
			return fmt.Errorf("linking %s to its blob: %w", f.Path, err)
		}
		note(path.Join(repo, "snapshots", commit, f.Path))
	}
	if err := atomicfile.SyncDir(blobs); err != nil {
		return err
	}
	if rev != "" && rev != commit {
		ref := filepath.Join(repoDir, "refs", filepath.FromSlash(rev))
		if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", filepath.Dir(ref), err)
		}
		if err := atomicfile.Write(ref, []byte(commit), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", ref, err)
		}
		note(path.Join(repo, "refs", rev))
	}
	return nil
}

// checkLinks refuses a symbolic link (or a file) where the hf-cache layout writes a
// folder: dest's models--ORG--NAME, its blobs, snapshots, snapshots/COMMIT (and the
// folders of the files under it, the part files' folder included) and refs (and the
// folders of a revision's name). A link there would send the layout's writes outside
// dest. dest itself may be a link: it is the recipe's choice of where the cache lives.
func (s *Step) checkLinks(dest, commit, rev string, files []fetch.File) error {
	repo := repoFolder(s.spec.HF.Repo)
	snap := repo + "/snapshots/" + commit
	dirs := []string{repo, repo + "/blobs", repo + "/snapshots", snap, snap + "/" + fetch.WorkDir, repo + "/refs"}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			dirs = append(dirs, snap+"/"+d)
		}
	}
	if rev != "" && rev != commit {
		for d := path.Dir(rev); d != "."; d = path.Dir(d) {
			dirs = append(dirs, repo+"/refs/"+d)
		}
	}
	seen := map[string]bool{}
	for _, rel := range dirs {
		if seen[rel] {
			continue
		}
		seen[rel] = true
		p := filepath.Join(dest, filepath.FromSlash(rel))
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		shown := filepath.Join(s.spec.Dest, filepath.FromSlash(rel))
		if err != nil {
			return fmt.Errorf("checking %s: %w", shown, err)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			return fmt.Errorf("%s is a symbolic link (to %s): the hf-cache layout writes only under dest (%s), and through the link its writes would land outside it; replace the link with a real folder (move what it points to into its place), or point dest at the link's target, and run again",
				shown, target, s.spec.Dest)
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is not a folder: the hf-cache layout keeps a folder there; move it away and run again", shown)
		}
	}
	return nil
}
