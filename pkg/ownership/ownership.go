// Package ownership says what sglprov may delete on a node and deletes it. A record names
// what a recipe put there: a unit, a folder of downloaded weights with the files sglprov
// wrote in it and the folders it made, a generations folder. Before anything a record names
// is deleted the record is checked (kinds and paths of the form sglprov writes, paths under
// the root, no system folder); a weights folder loses the files its record lists, never
// through a link, and then the folders sglprov made when they are empty. A tree sglprov did
// not make is never deleted: what else is in the folder stays byte for byte.
//
// It is a library: the engine and the commands build on it; it knows no recipe.
package ownership

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Kinds of Owned.
const (
	// KindUnit is a service unit; Path is its name.
	KindUnit = "unit"
	// KindWeights is a folder a download wrote into; Path is its host path.
	KindWeights = "weights"
	// KindGenerations is a recipe's generations folder; Path is its host path.
	KindGenerations = "generations"
	// KindGPU is a GPU a recipe's server runs on (its UUID, or "index N"); nothing is
	// deleted for it.
	KindGPU = "gpu"
)

// Owned is something on the node a recipe installed and a remove takes away.
type Owned struct {
	// Kind is KindUnit, KindWeights, KindGenerations or KindGPU.
	Kind string `json:"kind"`
	// Path is the unit's name, or the host path of the folder.
	Path string `json:"path"`
	// Step is the step that made it; Keep, for generations, how many are kept.
	Step string `json:"step,omitempty"`
	Keep int    `json:"keep,omitempty"`
	// Manager is, for a unit, the service manager that installed it ("" is systemd).
	Manager string `json:"manager,omitempty"`
	// Files are, for weights, the files sglprov wrote in Path: relative, '/'-separated.
	Files []string `json:"files,omitempty"`
	// Dirs are the folders sglprov made, relative to Path ("." is Path itself).
	Dirs []string `json:"dirs,omitempty"`
	// Parts are, for weights, the part files its download keeps while a listed file is
	// not complete (relative to Path, '/'-separated; each with its resume records): the
	// only part files gc and remove free there, and not while a download holds one.
	Parts []string `json:"parts,omitempty"`
	// Listed says that Files and Dirs are recorded. A weights record without it was
	// written by an older sglprov, which listed nothing: nothing in its folder is deleted.
	Listed bool `json:"listed,omitempty"`
	// Dev and Ino identify the folder at Path when sglprov wrote there: a folder put in
	// its place since (another folder, a link elsewhere) is not deleted from.
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
	// Recipe is, for an orphan unit or generations folder (one its recipe stopped naming:
	// a renamed unit, generations turned off), the recipe that installed it: the unit's
	// header and the generations record are that recipe's.
	Recipe string `json:"recipe,omitempty"`
}

// SystemFolder reports whether the host path p is root itself or one of the system folders
// under root (root "" or "/" is the host's): "/", "/etc", "/home", "/usr", "/var", "/opt",
// ... (their subfolders are not). A p reached through links is judged as it resolves too.
func SystemFolder(root, p string) bool {
	if isSystem(root, p) {
		return true
	}
	if r, err := resolve(p); err == nil && r != filepath.Clean(p) {
		rr := root
		if root != "" && root != "/" {
			if x, err := resolve(root); err == nil {
				rr = x
			}
		}
		return isSystem(rr, r) || isSystem("", r)
	}
	return false
}

func isSystem(root, p string) bool {
	p = filepath.Clean(p)
	if root != "" && root != "/" {
		root = filepath.Clean(root)
		if p == root {
			return true
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return slices.Contains(recipe.SystemFolders, p)
		}
		p = "/" + rel
	}
	return slices.Contains(recipe.SystemFolders, p)
}

// CheckDest refuses, as a place sglprov writes into and deletes from, a system folder
// (SystemFolder): the error names it and the fix, and wraps exitcode.ErrUsage. what names
// the field ("dest").
func CheckDest(root, what, p string) error {
	if strings.TrimSpace(p) == "" || !SystemFolder(root, p) {
		return nil
	}
	return fmt.Errorf("%w: %s %q is a system folder, which holds what sglprov did not write; name a folder of its own, such as /var/lib/sglprov/models/NAME",
		exitcode.ErrUsage, what, p)
}

// Check refuses a record that sglprov would not have written: an unknown kind, a unit name
// with a path in it, a folder that is relative, not clean, outside root or a system folder,
// a listed file or folder that leaves its folder, a list of files without the device and
// inode of their folder (sglprov records them with every list). The error names the record and wraps
// exitcode.ErrUsage; nothing a refused record names is deleted.
func (o Owned) Check(root string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: the record %s %q: %s; sglprov does not write such a record: delete it from the state file",
			exitcode.ErrUsage, o.Kind, o.Path, fmt.Sprintf(format, args...))
	}
	if o.Recipe != "" && (strings.ContainsAny(o.Recipe, "/\\\x00") || o.Recipe == "." || o.Recipe == "..") {
		return bad("the recipe %q is not a recipe name", o.Recipe)
	}
	switch o.Kind {
	case KindUnit:
		if o.Path == "" || strings.ContainsAny(o.Path, "/\x00") || o.Path == "." || o.Path == ".." {
			return bad("not a unit name")
		}
		return nil
	case KindGPU:
		return nil
	case KindWeights, KindGenerations:
	default:
		return bad("unknown kind")
	}
	if !filepath.IsAbs(o.Path) || filepath.Clean(o.Path) != o.Path {
		return bad("not a clean absolute path")
	}
	if root != "" && root != "/" && !Within(filepath.Clean(root), o.Path) {
		return bad("outside the root %s", root)
	}
	if SystemFolder(root, o.Path) {
		return bad("a system folder")
	}
	for _, f := range o.Files {
		if !localPath(f) || f == "." {
			return bad("the listed file %q leaves the folder", f)
		}
	}
	for _, d := range o.Dirs {
		if !localPath(d) {
			return bad("the listed folder %q leaves the folder", d)
		}
	}
	for _, p := range o.Parts {
		if !localPath(p) || p == "." {
			return bad("the part file %q leaves the folder", p)
		}
	}
	if o.Kind == KindWeights && o.Listed && o.Ino == 0 {
		return bad("it lists files but not the device and inode of its folder, which sglprov records with every list")
	}
	return nil
}

// localPath reports whether rel is a clean relative '/'-separated path that stays inside
// its folder ("." is the folder itself).
func localPath(rel string) bool {
	return rel != "" && !strings.ContainsRune(rel, 0) && path.Clean(rel) == rel && !path.IsAbs(rel) &&
		rel != ".." && !strings.HasPrefix(rel, "../")
}

// Within reports whether p is dir or lies inside it (both clean; compared as strings).
func Within(dir, p string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// Overlaps reports whether two host paths name one folder or one lies inside the other:
// as written, as they resolve through links, or by device and inode (a bind mount, a second
// name of one folder).
func Overlaps(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	if Within(a, b) || Within(b, a) {
		return true
	}
	ra, erra := resolve(a)
	rb, errb := resolve(b)
	if erra == nil && errb == nil && (Within(ra, rb) || Within(rb, ra)) {
		return true
	}
	return insideByInode(a, b) || insideByInode(b, a)
}

// insideByInode reports whether p, or a folder above it, is the folder dir (device and
// inode).
func insideByInode(dir, p string) bool {
	di, err := os.Stat(dir)
	if err != nil {
		return false
	}
	for q := p; ; q = filepath.Dir(q) {
		if qi, err := os.Stat(q); err == nil && os.SameFile(di, qi) {
			return true
		}
		if q == filepath.Dir(q) {
			return false
		}
	}
}

// resolve returns p with every link resolved; the part that does not exist yet is kept
// as written below the longest part that does.
func resolve(p string) (string, error) {
	p = filepath.Clean(p)
	var rest []string
	for q := p; ; q = filepath.Dir(q) {
		r, err := filepath.EvalSymlinks(q)
		if err == nil {
			for i := len(rest) - 1; i >= 0; i-- {
				r = filepath.Join(r, rest[i])
			}
			return r, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if q == filepath.Dir(q) {
			return "", err
		}
		rest = append(rest, filepath.Base(q))
	}
}

// Identify returns the device and inode of the folder at p (0, 0 when it cannot be read).
func Identify(p string) (dev, ino uint64) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino
	}
	return 0, 0
}

// Usage returns the bytes of the listed files that are still there (a file with several
// names counted once; a link counts nothing).
func (o Owned) Usage() int64 {
	var total int64
	seen := map[[2]uint64]bool{}
	for _, f := range o.Files {
		fi, err := os.Lstat(filepath.Join(o.Path, filepath.FromSlash(f)))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[id] {
				continue
			}
			seen[id] = true
		}
		total += fi.Size()
	}
	return total
}

// ErrUnlisted is returned by Remove for a weights record without the list of what sglprov
// wrote (Listed false): nothing is deleted.
var ErrUnlisted = errors.New("no list of the files sglprov wrote there (recorded by an older sglprov): nothing in it is deleted; delete it yourself once no recipe needs it")

// Removed says what Remove deleted and left.
type Removed struct {
	// Files is how many listed files were deleted; Bytes their size.
	Files int
	Bytes int64
	// Kept are the folders sglprov made that still hold what it did not write, relative to
	// the record's Path.
	Kept []string
}

// Remove deletes what a weights record lists: each file (a regular file or a link; never
// through a link or a folder that is a link), then each folder sglprov made, deepest first,
// when it is empty. The record must pass Check. The folder is opened once, without
// following a link, and checked by that handle to be the one sglprov wrote into (Dev, Ino):
// another folder, or a link, at Path is refused and nothing is deleted. Everything after
// the check is deleted relative to that handle (openat, unlinkat), never by path again, so
// a folder or link swapped in at Path meanwhile is never reached. Files already gone are no
// error.
func (o Owned) Remove(root string) (*Removed, error) {
	if err := o.Check(root); err != nil {
		return nil, err
	}
	if !o.Listed {
		return nil, ErrUnlisted
	}
	res := &Removed{}
	dirfd, err := unix.Open(o.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return res, nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR) && isLink(o.Path):
		return nil, fmt.Errorf("%s is not the folder sglprov wrote into (a link is in its place); nothing in it is deleted: delete what you no longer need yourself", o.Path)
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("%s is no longer a folder; nothing in it is deleted", o.Path)
	case err != nil:
		return nil, fmt.Errorf("opening %s: %w", o.Path, err)
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return nil, fmt.Errorf("checking %s: %w", o.Path, err)
	}
	if uint64(st.Dev) != o.Dev || st.Ino != o.Ino {
		return nil, fmt.Errorf("%s is not the folder sglprov wrote into (another folder is in its place); nothing in it is deleted: delete what you no longer need yourself", o.Path)
	}
	if afterCheck != nil {
		afterCheck()
	}
	var errs []error
	seen := map[[2]uint64]bool{}
	for _, f := range o.Files {
		n, err := unlinkUnder(dirfd, f, false, seen)
		if err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", filepath.Join(o.Path, filepath.FromSlash(f)), err))
			continue
		}
		if n >= 0 {
			res.Files++
			res.Bytes += n
		}
	}
	dirs := slices.Clone(o.Dirs)
	sort.SliceStable(dirs, func(i, j int) bool { return depth(dirs[i]) > depth(dirs[j]) })
	for _, d := range dirs {
		if d == "." {
			continue
		}
		if _, err := unlinkUnder(dirfd, d, true, nil); err != nil {
			if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
				res.Kept = append(res.Kept, d)
				continue
			}
			errs = append(errs, fmt.Errorf("removing the folder %s: %w", filepath.Join(o.Path, filepath.FromSlash(d)), err))
		}
	}
	if slices.Contains(o.Dirs, ".") {
		// Path itself, when sglprov made it and it is empty now: through its parent's
		// handle, and only while the entry there is still the folder checked above.
		kept, err := removeSelf(o.Path, st)
		if kept {
			res.Kept = append(res.Kept, ".")
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// isLink reports whether p is a symbolic link.
func isLink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// afterCheck, when set (by tests), runs between the identity check of Remove and the first
// deletion: where a folder or link swapped in at the record's path would be reached by a
// deletion by path.
var afterCheck func()

// removeSelf removes the empty folder at p, whose identity is st, through its parent's
// handle: only when the entry there is that folder (not a link, not another folder). It
// reports whether the folder stays because it is not empty.
func removeSelf(p string, st unix.Stat_t) (kept bool, err error) {
	parent, err := unix.Open(filepath.Dir(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false, fmt.Errorf("opening the folder above %s: %w", p, err)
	}
	defer unix.Close(parent)
	name := filepath.Base(p)
	var now unix.Stat_t
	if err := unix.Fstatat(parent, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return false, nil // gone, or another is in its place: not sglprov's to remove
	}
	err = unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return false, nil
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return true, nil
	}
	return false, fmt.Errorf("removing the folder %s: %w", p, err)
}

func depth(rel string) int {
	if rel == "." {
		return 0
	}
	return strings.Count(rel, "/") + 1
}
