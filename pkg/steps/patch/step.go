package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gitrepo"
)

// record is the data a patch step keeps in the state between runs.
type record struct {
	// Base is the tree's git HEAD when the series was applied ("" outside git).
	Base string `json:"base,omitempty"`
	// Files maps each path the series touches (relative to dir) to its digests.
	Files map[string]fileRecord `json:"files"`
}

// fileRecord holds the sha256 of a file before and after the series ("absent" when the
// file does not exist).
type fileRecord struct {
	Pre  string `json:"pre"`
	Post string `json:"post"`
}

func (s *Step) root(env *engine.Env) string { return env.Path(s.spec.Dir) }

func (s *Step) load(env *engine.Env) (*series, error) {
	return loadSeries(s.spec.Series, env.ReadRecipeFile)
}

// ReadFiles reads the series and every patch it names (validate).
func (s *Step) ReadFiles(env *engine.Env) error {
	_, err := s.load(env)
	return engine.AtField("series", err)
}

// Fingerprint digests the series file and every patch it names.
func (s *Step) Fingerprint(_ context.Context, env *engine.Env) (map[string]string, error) {
	ser, err := s.load(env)
	if err != nil {
		return nil, err
	}
	fp := map[string]string{"series": ser.Digest}
	for _, p := range ser.Patches {
		fp["patch:"+p.Name] = p.Digest
	}
	return fp, nil
}

// Intact reports whether every file the series wrote still has the digest recorded
// after the apply.
func (s *Step) Intact(_ context.Context, env *engine.Env) (bool, string, error) {
	var rec record
	if !env.LoadData(&rec) || rec.Files == nil {
		return false, "no record of the patched files", nil
	}
	root := s.root(env)
	for _, rel := range sortedKeys(rec.Files) {
		d, err := fileDigest(root, rel)
		if err != nil {
			return false, "", err
		}
		if d != rec.Files[rel].Post {
			return false, "outputs changed: " + filepath.Join(root, rel), nil
		}
	}
	return true, "", nil
}

// Run applies the series. A file whose content is neither what the series started from
// nor what it made (a local edit) stops the run unless the user forces it; with Force the
// files the series touches are restored from git first.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	ser, err := s.load(env)
	if err != nil {
		return err
	}
	root := s.root(env)
	if err := checkDir(root); err != nil {
		return err
	}
	head := gitHead(ctx, root)

	// One run at a time writes the tree, whatever its state folder, and one step of this
	// run at a time.
	lock, err := lockTree(ctx, root)
	if err != nil {
		return err
	}
	defer lock.Release()

	recovered, err := s.recoverEarlier(env, root, head, ser)
	if err != nil {
		return err
	}
	if err := s.prepare(ctx, env, root, head, ser, recovered); err != nil {
		return err
	}
	base := newTree(root)
	if head != "" {
		base.merge = gitMerger{ctx: ctx, dir: root, scratch: filepath.Join(root, stageDir)}
	}
	for _, rel := range ser.touched() {
		if _, err := base.get(rel); err != nil {
			return err
		}
	}
	after, before, outcomes, err := applySeries(base, ser)
	var conflict *conflictError
	if errors.As(err, &conflict) && head != "" && !env.Force {
		// A hand edit, or a run killed between two files of the series: git holds the
		// pristine files.
		return fmt.Errorf("%w\n(the tree is a git checkout: `sglprov apply --force %s` restores the series' files from git and applies it again)", err, s.name)
	}
	if err != nil {
		return err
	}
	if err := write(root, s.name, after, base); err != nil {
		return err
	}
	rec, err := newRecord(head, ser, after, before)
	if err != nil {
		return err
	}
	if err := env.SaveData(rec); err != nil {
		return fmt.Errorf("recording patched files: %w", err)
	}
	logOutcomes(env, outcomes)
	return nil
}

// checkDir refuses a tree root that is not a folder.
func checkDir(root string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("patching %s: %w", root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("patching %s: not a directory", root)
	}
	return nil
}

// recoverEarlier deals with what an earlier run killed while writing left: it finishes
// its journalled renames (the whole series had applied in memory), or drops what it
// staged, and reports whether a journal was finished. A forced run in a git checkout
// drops a journal unfinished: it restores the series' files from git afterwards, which
// is the way out of a journal that cannot be finished. Temporary files and merge
// folders of killed runs are removed.
func (s *Step) recoverEarlier(env *engine.Env, root, head string, ser *series) (bool, error) {
	var recovered bool
	if env.Force && head != "" {
		dropped, err := dropJournal(root)
		if err != nil {
			return false, err
		}
		if dropped != "" {
			env.Log.Info("dropped what an earlier run left, "+dropped+"; the files are restored from git", "dir", root)
		}
	} else {
		found, rec, err := recoverJournal(root, s.name)
		if err != nil {
			return false, err
		}
		recovered = rec
		if found != "" {
			env.Log.Info("found what an earlier run left: "+found, "dir", root)
		}
	}
	if n := removeLitter(root, ser.touched()); n > 0 {
		env.Log.Info("removed temporary files an earlier run left", "dir", root, "files", n)
	}
	if n := gitrepo.RemoveStaleMerges(time.Now()); n > 0 {
		env.Log.Info("removed the three-way merge folders that earlier runs killed mid-merge left in the system's temporary folder", "dir", os.TempDir(), "folders", n)
	}
	return recovered, nil
}

// prepare readies the tree for the series: a forced run restores the series' files
// from git; otherwise, on the HEAD the last record was made at, a file changed by hand
// since stops the run.
func (s *Step) prepare(ctx context.Context, env *engine.Env, root, head string, ser *series, recovered bool) error {
	if env.Force {
		if err := restore(ctx, root, ser); err != nil {
			return err
		}
		env.Log.Info("restored the patched files from git", "dir", s.spec.Dir)
		return nil
	}
	var rec record
	hasRec := env.LoadData(&rec) && rec.Files != nil
	if !hasRec || rec.Base != head || recovered {
		return nil
	}
	for _, rel := range sortedKeys(rec.Files) {
		d, err := fileDigest(root, rel)
		if err != nil {
			return err
		}
		if fr := rec.Files[rel]; d != fr.Pre && d != fr.Post {
			return fmt.Errorf("%s was changed by hand since the patches were applied; run `sglprov apply --force %s` to restore it from git and re-apply",
				filepath.Join(root, rel), s.name)
		}
	}
	return nil
}

// newRecord records the digests of every file the series touches before and after it.
func newRecord(head string, ser *series, after, before *tree) (record, error) {
	rec := record{Base: head, Files: map[string]fileRecord{}}
	for _, rel := range ser.touched() {
		a, err := after.get(rel)
		if err != nil {
			return record{}, err
		}
		b, err := before.get(rel)
		if err != nil {
			return record{}, err
		}
		rec.Files[rel] = fileRecord{Pre: entryDigest(b), Post: entryDigest(a)}
	}
	return rec, nil
}

// logOutcomes logs each patch's outcome and keeps them as the run's detail.
func logOutcomes(env *engine.Env, outcomes []outcome) {
	for _, o := range outcomes {
		if len(o.Merged) > 0 {
			env.Log.Info("patch "+o.Result, "patch", o.Patch, "files", strings.Join(o.Merged, ", "))
			continue
		}
		env.Log.Info("patch "+o.Result, "patch", o.Patch)
	}
	env.Detail("patches", outcomes)
}

func entryDigest(e *entry) string {
	switch {
	case !e.exists:
		return absent
	case e.link:
		return linkDigest(e.data)
	}
	return digest(e.data)
}

// linkDigest is the digest recorded for a symbolic link: its target's, marked as a link's.
func linkDigest(target []byte) string { return "link " + digest(target) }

// fileDigest returns the digest of the file at rel (of its target for a symbolic link),
// absent when there is none, or, for something else that is not a regular file (a FIFO is never opened: it waits for a writer),
// its type.
func fileDigest(root, rel string) (string, error) {
	p := filepath.Join(root, rel)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return absent, nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(p)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", p, err)
		}
		return linkDigest([]byte(target)), nil
	}
	if !fi.Mode().IsRegular() {
		return "type " + fi.Mode().Type().String(), nil
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	return digest(data), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// gitMerger finds preimage blobs in the tree's git object store and merges with git,
// writing the three versions in the step's stage folder (scratch).
type gitMerger struct {
	ctx     context.Context
	dir     string
	scratch string
}

func (g gitMerger) Blob(oid string) ([]byte, error) { return gitrepo.Blob(g.ctx, g.dir, oid) }

func (g gitMerger) Merge(ours, base, theirs []byte) ([]byte, int, error) {
	return gitrepo.MergeFile(g.ctx, g.scratch, ours, base, theirs)
}

// gitHead returns the tree's HEAD commit, or "" when dir is not a git work tree.
func gitHead(ctx context.Context, dir string) string {
	head, err := gitrepo.Head(ctx, dir)
	if err != nil {
		return ""
	}
	return head
}

// restore puts the files the series touches back as git's HEAD has them: tracked files
// are checked out, files the series creates are removed.
func restore(ctx context.Context, root string, ser *series) error {
	if gitHead(ctx, root) == "" {
		return fmt.Errorf("restoring %s: not a git work tree with a commit; restore the patched files by hand and run again", root)
	}
	paths := ser.touched()
	args := append([]string{"-C", root, "ls-tree", "-r", "-z", "--name-only", "HEAD", "--"}, paths...)
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		return fmt.Errorf("restoring %s: listing tracked files: %w", root, gitErr(err))
	}
	tracked := map[string]bool{}
	for _, p := range strings.Split(string(out), "\x00") {
		if p != "" {
			tracked[filepath.FromSlash(p)] = true
		}
	}
	created := ser.created()
	var checkout []string
	for _, rel := range paths {
		switch {
		case tracked[rel]:
			checkout = append(checkout, rel)
		case created[rel]:
			p := filepath.Join(root, rel)
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("restoring %s: removing %s: %w", root, p, err)
			}
		default:
			return fmt.Errorf("restoring %s: %s is not tracked by git; restore it by hand and run again", root, rel)
		}
	}
	if len(checkout) == 0 {
		return nil
	}
	args = append([]string{"-C", root, "checkout", "HEAD", "--"}, checkout...)
	if out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("restoring %s: git checkout: %w: %s", root, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func gitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
