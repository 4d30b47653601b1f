package patch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// absent is the digest recorded for a file that does not exist.
const absent = "absent"

// entry is one file of the in-memory tree: a regular file (data is its content) or a
// symbolic link (data is its target).
type entry struct {
	exists bool
	link   bool
	data   []byte
	perm   fs.FileMode
}

// linkPerm is the mode a symbolic link entry records.
const linkPerm = fs.ModeSymlink | 0o777

// Git's file modes, as a diff's mode lines give them (go-gitdiff keeps them as numbers).
const (
	gitTypeMask = 0o170000
	gitRegular  = 0o100000
	gitSymlink  = 0o120000
)

// gitType returns the type bits of a git mode (0 when the diff gives no mode).
func gitType(m fs.FileMode) uint32 { return uint32(m) & gitTypeMask }

// clampPerm bounds the permissions a patch gives a file to what git itself records: 0755
// for a file its owner may execute, 0644 otherwise. Nothing the patch says makes a file
// writable by group or others, or setuid, setgid or sticky; tighter bits are kept.
func clampPerm(m fs.FileMode) fs.FileMode {
	if m&0o100 != 0 {
		return m.Perm() & 0o755
	}
	return m.Perm() & 0o644
}

// modeChange reports whether f changes a regular file's mode (git's "old mode"/"new mode"
// lines).
func modeChange(f *gitdiff.File) bool {
	return f.OldMode != 0 && f.NewMode != 0 && f.OldMode != f.NewMode &&
		gitType(f.OldMode) == gitRegular && gitType(f.NewMode) == gitRegular
}

// modeFrom reports whether a file of mode perm is in the mode old that a mode change
// starts from. Applied forward, the owner's execute bit decides (git records 100644 or
// 100755, while a checkout's group bits follow the umask); undone, the file must have
// exactly the mode the change gave it, which is what tells a tree with the change from
// one without it.
func modeFrom(perm, old fs.FileMode, forward bool) bool {
	if forward {
		return perm&0o100 == old&0o100
	}
	return perm == clampPerm(old)
}

// tree is the in-memory view of the files a series touches. Files are read from disk on
// first use; changes stay in memory until write.
type tree struct {
	root  string
	files map[string]*entry
	// merge finds preimage blobs and merges three-way (nil: hunks apply exactly or not).
	merge merger
	// merged lists the files applied by a three-way merge, in order.
	merged []string
}

// merger is what a three-way apply needs from git: the preimage blob a diff's `index`
// line names, and a three-way file merge.
type merger interface {
	// Blob returns the blob oid names, or an error when the object store lacks it.
	Blob(oid string) ([]byte, error)
	// Merge applies the changes from base to theirs to ours; it returns the result and
	// the number of conflicts.
	Merge(ours, base, theirs []byte) ([]byte, int, error)
}

func newTree(root string) *tree {
	return &tree{root: root, files: map[string]*entry{}}
}

// clone returns a copy whose changes do not affect t (file contents are never modified
// in place, so they are shared).
func (t *tree) clone() *tree {
	c := &tree{root: t.root, files: make(map[string]*entry, len(t.files)), merge: t.merge, merged: append([]string(nil), t.merged...)}
	for k, v := range t.files {
		e := *v
		c.files[k] = &e
	}
	return c
}

// get returns the file at rel, reading it from disk the first time.
func (t *tree) get(rel string) (*entry, error) {
	if e, ok := t.files[rel]; ok {
		return e, nil
	}
	e, err := readEntry(t.root, rel)
	if err != nil {
		return nil, err
	}
	t.files[rel] = e
	return e, nil
}

func (t *tree) set(rel string, e entry) {
	t.files[rel] = &e
}

// readEntry reads the file rel under root; a missing file is an entry that does not exist.
// A symbolic link at rel is read as a link (its target), never followed; a path whose
// folders lead out of the tree through one is refused, so that a patch never writes
// through a link out of the tree.
func readEntry(root, rel string) (*entry, error) {
	if err := checkInside(root, rel); err != nil {
		return nil, err
	}
	p := filepath.Join(root, rel)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return &entry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		return &entry{exists: true, link: true, data: []byte(target), perm: linkPerm}, nil
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s); patches change regular files and symbolic links only", p, fi.Mode().Type())
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return &entry{exists: true, data: data, perm: fi.Mode().Perm()}, nil
}

// checkInside refuses a path whose existing folders lead out of root through a symbolic
// link.
func checkInside(root, rel string) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", root, err)
	}
	dir := filepath.Dir(filepath.Join(root, rel))
	for {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			r, err := filepath.Rel(realRoot, real)
			if err != nil || !filepath.IsLocal(r) && r != "." {
				return fmt.Errorf("path %q leaves the tree %s through a symbolic link", rel, root)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("resolving %s: %w", dir, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}
