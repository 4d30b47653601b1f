package patch

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// conflictError says where and why a patch does not apply.
type conflictError struct {
	Patch  string
	File   string
	Hunk   string
	Detail string
}

func (e *conflictError) Error() string {
	if e.Hunk == "" {
		return fmt.Sprintf("patch %s does not apply: %s: %s", e.Patch, e.File, e.Detail)
	}
	return fmt.Sprintf("patch %s does not apply: %s: hunk %s: %s", e.Patch, e.File, e.Hunk, e.Detail)
}

func hunkHeader(f *gitdiff.TextFragment) string {
	return fmt.Sprintf("@@ -%d,%d +%d,%d @@", f.OldPosition, f.OldLines, f.NewPosition, f.NewLines)
}

// applyPatch applies every file diff of p to t. On a conflict t may be partly changed:
// callers apply to a clone.
func applyPatch(t *tree, p patchFile) error {
	for _, f := range p.Files {
		if err := applyFile(t, p.Name, f, !p.reverse); err != nil {
			return err
		}
	}
	return nil
}

func fileName(f *gitdiff.File) string {
	if f.NewName != "" {
		return f.NewName
	}
	return f.OldName
}

// applyFile applies one file diff to t. When its hunks do not apply exactly and threeWay is
// set (never for an undo: a merge that "undoes" a patch from its postimage would succeed
// on a tree that never had it), the diff is applied to its preimage blob and the result
// merged three-way into the file, as `git apply --3way` does.
func applyFile(t *tree, patch string, f *gitdiff.File, threeWay bool) error {
	d := fileDiff{t: t, patch: patch, name: fileName(f), f: f, threeWay: threeWay}
	src, err := d.source()
	if err != nil {
		return err
	}
	if (f.IsRename || f.IsCopy) && !f.IsNew {
		if err := d.targetFree(); err != nil {
			return err
		}
	}
	out, err := d.content(src)
	if err != nil {
		return err
	}
	if f.IsDelete {
		t.set(f.OldName, entry{})
		return nil
	}
	perm, link, err := d.mode(src)
	if err != nil {
		return err
	}
	// An undo (threeWay unset) is never written: a link it would make back (a patch that
	// removes an upstream link to /usr/...) is not the patch's to check.
	if link && threeWay {
		if err := checkLinkTarget(t.root, f.NewName, string(out)); err != nil {
			return fmt.Errorf("patch %s: %w", patch, err)
		}
	}
	if f.IsRename {
		t.set(f.OldName, entry{})
	}
	t.set(f.NewName, entry{exists: true, link: link, data: out, perm: perm})
	return nil
}

// fileDiff is one file diff of a patch being applied to a tree.
type fileDiff struct {
	t        *tree
	patch    string
	name     string
	f        *gitdiff.File
	threeWay bool
}

// conflict is the error of a diff that does not apply to the file, for detail.
func (d fileDiff) conflict(detail string) error {
	return &conflictError{Patch: d.patch, File: d.name, Detail: detail}
}

// source returns the entry the diff applies to: an empty one for a new file, else the
// existing file, whose type and mode must be the ones the diff changes.
func (d fileDiff) source() (entry, error) {
	f := d.f
	if f.IsNew {
		if err := d.targetFree(); err != nil {
			return entry{}, err
		}
		return entry{perm: 0o644}, nil
	}
	e, err := d.t.get(f.OldName)
	if err != nil {
		return entry{}, err
	}
	if !e.exists {
		return entry{}, d.conflict("the file does not exist")
	}
	src := *e
	diffLink := gitType(f.OldMode) == gitSymlink
	switch {
	case src.link && !diffLink && (f.OldMode != 0 || len(f.TextFragments) > 0 || f.IsBinary):
		return entry{}, d.conflict("it is a symbolic link, but the patch changes a regular file")
	case !src.link && diffLink:
		return entry{}, d.conflict("the patch changes a symbolic link, but it is a regular file")
	case !src.link && modeChange(f) && !modeFrom(src.perm, f.OldMode, d.threeWay):
		return entry{}, d.conflict(fmt.Sprintf("the patch changes its mode from %o to %o, but its mode is %o",
			uint32(f.OldMode), uint32(f.NewMode), uint32(src.perm)))
	}
	return src, nil
}

// targetFree refuses a diff that creates its new name where a file already exists.
func (d fileDiff) targetFree() error {
	dst, err := d.t.get(d.f.NewName)
	if err != nil {
		return err
	}
	if dst.exists {
		return d.conflict("the patch creates it, but it already exists")
	}
	return nil
}

// content applies the diff's fragments to src's data, merging three-way from the
// preimage when the hunks do not apply exactly and the diff allows it.
func (d fileDiff) content(src entry) ([]byte, error) {
	out, err := applyContent(src.data, d.f)
	var hunk *hunkError
	if errors.As(err, &hunk) && d.threeWay {
		merged, ok, merr := mergeFromPreimage(d.t, d.patch, d.name, src.data, d.f)
		if merr != nil {
			return nil, merr
		}
		if ok {
			out, err = merged, nil
			d.t.merged = append(d.t.merged, d.name)
		}
	}
	if err != nil {
		if errors.As(err, &hunk) {
			return nil, &conflictError{Patch: d.patch, File: d.name, Hunk: hunkHeader(hunk.frag), Detail: diagnose(src.data, hunk.frag, hunk.err)}
		}
		return nil, d.conflict(err.Error())
	}
	return out, nil
}

// mode returns the permissions and type the file has after the diff: src's, or those
// of the diff's new mode when it sets one.
func (d fileDiff) mode(src entry) (fs.FileMode, bool, error) {
	f := d.f
	perm, link := src.perm, src.link
	if f.IsNew && f.NewMode != 0 || f.OldMode != 0 && f.NewMode != 0 && f.OldMode != f.NewMode {
		switch gitType(f.NewMode) {
		case gitSymlink:
			perm, link = linkPerm, true
		case gitRegular, 0:
			perm, link = clampPerm(f.NewMode), false
		default:
			return 0, false, d.conflict(fmt.Sprintf("mode %o is neither a regular file nor a symbolic link", uint32(f.NewMode)))
		}
	}
	if link != src.link && f.OldMode != 0 && !f.IsNew {
		return 0, false, d.conflict("the patch changes a regular file into a symbolic link or back; git writes that as a removal and a new file")
	}
	return perm, link, nil
}

// checkLinkTarget refuses the target of a symbolic link that the patch makes at rel unless
// it points inside the tree: a relative target that stays in the tree, through no link
// that leads out of it. Errors wrap exitcode.ErrUsage: the patch is bad input.
func checkLinkTarget(root, rel, target string) error {
	bad := func(why string) error {
		return fmt.Errorf("%s: the symbolic link's target %q %s; patches make links only to paths inside the tree: %w", rel, target, why, exitcode.ErrUsage)
	}
	if err := lexicalLinkTarget(rel, target); err != nil {
		return bad(err.Error())
	}
	if root == "" {
		return nil
	}
	joined := filepath.Join(filepath.Dir(rel), target)
	p := filepath.Join(root, joined)
	real, err := filepath.EvalSymlinks(p)
	switch {
	case err == nil:
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			return fmt.Errorf("resolving %s: %w", root, err)
		}
		if r, err := filepath.Rel(realRoot, real); err != nil || !filepath.IsLocal(r) && r != "." {
			return bad("leads out of the tree through a symbolic link (to " + real + ")")
		}
	case errors.Is(err, fs.ErrNotExist):
		if err := checkInside(root, joined); err != nil {
			return bad("leads out of the tree through a symbolic link")
		}
	default:
		return fmt.Errorf("resolving %s: %w", p, err)
	}
	return nil
}

// lexicalLinkTarget checks a link target as text: relative, one line, and inside the
// tree when joined to the link's folder.
func lexicalLinkTarget(rel, target string) error {
	switch {
	case target == "":
		return errors.New("is empty")
	case strings.ContainsAny(target, "\x00\n"):
		return errors.New("holds a newline or a NUL")
	case filepath.IsAbs(target):
		return errors.New("is an absolute path")
	case !filepath.IsLocal(filepath.Join(filepath.Dir(rel), target)):
		return errors.New("points out of the tree")
	}
	return nil
}

// mergeFromPreimage merges f into cur from the preimage blob its `index` line names. It
// reports false (and no error) when there is nothing to merge from: no merger, no index
// line, a blob the clone lacks, or a diff that does not even apply to its own preimage. A
// real conflict is an error naming the first hunk that conflicts.
func mergeFromPreimage(t *tree, patch, name string, cur []byte, f *gitdiff.File) ([]byte, bool, error) {
	if t.merge == nil || f.OldOIDPrefix == "" || f.IsNew || f.IsBinary || strings.Trim(f.OldOIDPrefix, "0") == "" {
		return nil, false, nil
	}
	pre, err := t.merge.Blob(f.OldOIDPrefix)
	if err != nil {
		return nil, false, nil
	}
	post, err := applyContent(pre, f)
	if err != nil {
		return nil, false, nil
	}
	merged, conflicts, err := t.merge.Merge(cur, pre, post)
	if err != nil {
		return nil, false, fmt.Errorf("patch %s: %s: three-way merge: %w", patch, name, err)
	}
	if conflicts == 0 {
		return merged, true, nil
	}
	// Name the hunk: merge each hunk alone until one conflicts.
	frags := append([]*gitdiff.TextFragment(nil), f.TextFragments...)
	sort.SliceStable(frags, func(i, j int) bool { return frags[i].OldPosition < frags[j].OldPosition })
	detail := fmt.Sprintf("the file differs from the patch's preimage (blob %s) where the hunk changes it: the three-way merge has %d conflict(s)", f.OldOIDPrefix, conflicts)
	for _, frag := range frags {
		one := *f
		one.TextFragments = []*gitdiff.TextFragment{frag}
		post1, err := applyContent(pre, &one)
		if err != nil {
			continue
		}
		if _, n, err := t.merge.Merge(cur, pre, post1); err == nil && n > 0 {
			return nil, false, &conflictError{Patch: patch, File: name, Hunk: hunkHeader(frag), Detail: detail}
		}
	}
	return nil, false, &conflictError{Patch: patch, File: name, Detail: detail}
}

// hunkError is a failed text fragment.
type hunkError struct {
	frag *gitdiff.TextFragment
	err  error
}

func (e *hunkError) Error() string { return e.err.Error() }

// applyContent applies the fragments of f to src. Text fragments are applied by
// go-gitdiff's TextApplier, which is strict: each hunk must match at exactly the position
// it names (no offset search, no fuzz).
func applyContent(src []byte, f *gitdiff.File) ([]byte, error) {
	var out bytes.Buffer
	if f.IsBinary {
		if err := gitdiff.Apply(&out, bytes.NewReader(src), f); err != nil {
			return nil, err
		}
		return out.Bytes(), nil
	}
	if len(f.TextFragments) == 0 {
		return src, nil
	}
	frags := append([]*gitdiff.TextFragment(nil), f.TextFragments...)
	sort.SliceStable(frags, func(i, j int) bool { return frags[i].OldPosition < frags[j].OldPosition })
	a := gitdiff.NewTextApplier(&out, bytes.NewReader(src))
	for _, frag := range frags {
		if err := a.ApplyFragment(frag); err != nil {
			return nil, &hunkError{frag: frag, err: err}
		}
	}
	if err := a.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Results of a patch in a run.
const (
	resultApplied        = "applied"
	resultAlreadyApplied = "already applied"
	resultMerged         = "applied by a three-way merge"
)

// outcome is what happened to one patch.
type outcome struct {
	Patch  string `json:"patch"`
	Result string `json:"result"`
	// Merged names the files of the patch that were merged three-way from their preimage.
	Merged []string `json:"merged,omitempty"`
}

// applySeries applies the series to base in memory. It returns the tree after the
// series, the tree before it (as far as it can be told), and each patch's outcome.
// Nothing is written.
func applySeries(base *tree, s *series) (after, before *tree, outcomes []outcome, err error) {
	// The whole series already applied: undoing it, last patch first, works.
	undo := base.clone()
	undone := true
	for i := len(s.Patches) - 1; i >= 0; i-- {
		if err := applyPatch(undo, reversePatch(s.Patches[i])); err != nil {
			var c *conflictError
			if !errors.As(err, &c) {
				return nil, nil, nil, err
			}
			undone = false
			break
		}
	}
	if undone {
		for _, p := range s.Patches {
			outcomes = append(outcomes, outcome{Patch: p.Name, Result: resultAlreadyApplied})
		}
		return base, undo, outcomes, nil
	}

	cur := base.clone()
	for _, p := range s.Patches {
		next := cur.clone()
		ferr := applyPatch(next, p)
		if ferr == nil {
			o := outcome{Patch: p.Name, Result: resultApplied}
			if extra := next.merged[len(cur.merged):]; len(extra) > 0 {
				o.Result, o.Merged = resultMerged, extra
			}
			cur = next
			outcomes = append(outcomes, o)
			continue
		}
		var c *conflictError
		if !errors.As(ferr, &c) {
			return nil, nil, nil, ferr
		}
		if rerr := applyPatch(cur.clone(), reversePatch(p)); rerr == nil {
			outcomes = append(outcomes, outcome{Patch: p.Name, Result: resultAlreadyApplied})
			continue
		}
		return nil, nil, nil, ferr
	}
	return cur, base, outcomes, nil
}
