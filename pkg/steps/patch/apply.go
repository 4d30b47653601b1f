package patch

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/sglprov/sglprov/pkg/exitcode"
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
	name := fileName(f)
	conflict := func(detail string) error {
		return &conflictError{Patch: patch, File: name, Detail: detail}
	}
	var src entry
	if f.IsNew {
		dst, err := t.get(f.NewName)
		if err != nil {
			return err
		}
		if dst.exists {
			return conflict("the patch creates it, but it already exists")
		}
		src = entry{perm: 0o644}
	} else {
		e, err := t.get(f.OldName)
		if err != nil {
			return err
		}
		if !e.exists {
			return conflict("the file does not exist")
		}
		src = *e
		diffLink := gitType(f.OldMode) == gitSymlink
		switch {
		case src.link && !diffLink && (f.OldMode != 0 || len(f.TextFragments) > 0 || f.IsBinary):
			return conflict("it is a symbolic link, but the patch changes a regular file")
		case !src.link && diffLink:
			return conflict("the patch changes a symbolic link, but it is a regular file")
		case !src.link && modeChange(f) && !modeFrom(src.perm, f.OldMode, threeWay):
			return conflict(fmt.Sprintf("the patch changes its mode from %o to %o, but its mode is %o",
				uint32(f.OldMode), uint32(f.NewMode), uint32(src.perm)))
		}
	}
	if (f.IsRename || f.IsCopy) && !f.IsNew {
		dst, err := t.get(f.NewName)
		if err != nil {
			return err
		}
		if dst.exists {
			return conflict("the patch creates it, but it already exists")
		}
	}

	out, err := applyContent(src.data, f)
	var hunk *hunkError
	if errors.As(err, &hunk) && threeWay {
		merged, ok, merr := mergeFromPreimage(t, patch, name, src.data, f)
		if merr != nil {
			return merr
		}
		if ok {
			out, err = merged, nil
			t.merged = append(t.merged, name)
		}
	}
	if err != nil {
		if errors.As(err, &hunk) {
			return &conflictError{Patch: patch, File: name, Hunk: hunkHeader(hunk.frag), Detail: diagnose(src.data, hunk.frag, hunk.err)}
		}
		return conflict(err.Error())
	}

	if f.IsDelete {
		t.set(f.OldName, entry{})
		return nil
	}
	perm, link := src.perm, src.link
	if f.IsNew && f.NewMode != 0 || f.OldMode != 0 && f.NewMode != 0 && f.OldMode != f.NewMode {
		switch gitType(f.NewMode) {
		case gitSymlink:
			perm, link = linkPerm, true
		case gitRegular, 0:
			perm, link = clampPerm(f.NewMode), false
		default:
			return conflict(fmt.Sprintf("mode %o is neither a regular file nor a symbolic link", uint32(f.NewMode)))
		}
	}
	if link != src.link && f.OldMode != 0 && !f.IsNew {
		return conflict("the patch changes a regular file into a symbolic link or back; git writes that as a removal and a new file")
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

// splitLines splits b into lines that keep their line endings.
func splitLines(b []byte) []string {
	var lines []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			lines = append(lines, string(b))
			break
		}
		lines = append(lines, string(b[:i+1]))
		b = b[i+1:]
	}
	return lines
}

func show(line string) string {
	return fmt.Sprintf("%q", strings.TrimSuffix(line, "\n"))
}

// diagnose names the first line of src that differs from what frag expects, and where
// the hunk's old lines are, when they are somewhere else in the file.
func diagnose(src []byte, frag *gitdiff.TextFragment, err error) string {
	lines := splitLines(src)
	var old []string
	for _, l := range frag.Lines {
		if l.Old() {
			old = append(old, l.Line)
		}
	}
	start := int(frag.OldPosition) - 1
	if start < 0 {
		start = 0
	}
	detail := ""
	for k, want := range old {
		i := start + k
		if i >= len(lines) {
			detail = fmt.Sprintf("line %d: expected %s, found the end of the file", i+1, show(want))
			break
		}
		if lines[i] != want {
			detail = fmt.Sprintf("line %d: expected %s, found %s", i+1, show(want), show(lines[i]))
			if strings.TrimSuffix(strings.TrimSuffix(lines[i], "\n"), "\r") == strings.TrimSuffix(strings.TrimSuffix(want, "\n"), "\r") {
				detail += " (the line endings or the final newline differ)"
			}
			break
		}
	}
	if detail == "" {
		var c *gitdiff.Conflict
		if errors.As(err, &c) {
			return c.Error()
		}
		return err.Error()
	}
	if len(old) > 0 {
		for s := 0; s+len(old) <= len(lines); s++ {
			if s == start {
				continue
			}
			if equalAt(lines, s, old) {
				detail += fmt.Sprintf("; the hunk's lines are at line %d instead (the file has drifted; patches apply only at the lines their hunks name, without offset or fuzz)", s+1)
				break
			}
		}
	}
	return detail
}

func equalAt(lines []string, s int, want []string) bool {
	for k, w := range want {
		if lines[s+k] != w {
			return false
		}
	}
	return true
}

// reverseFile returns the diff that undoes f.
func reverseFile(f *gitdiff.File) *gitdiff.File {
	r := *f
	r.OldName, r.NewName = f.NewName, f.OldName
	r.IsNew, r.IsDelete = f.IsDelete, f.IsNew
	r.OldMode, r.NewMode = f.NewMode, f.OldMode
	r.OldOIDPrefix, r.NewOIDPrefix = f.NewOIDPrefix, f.OldOIDPrefix
	if f.IsCopy {
		// Undoing a copy deletes the copy.
		r.IsCopy, r.IsDelete = false, true
		r.OldName, r.NewName = f.NewName, ""
	}
	r.BinaryFragment, r.ReverseBinaryFragment = f.ReverseBinaryFragment, f.BinaryFragment
	r.TextFragments = make([]*gitdiff.TextFragment, len(f.TextFragments))
	for i, frag := range f.TextFragments {
		rf := *frag
		rf.OldPosition, rf.NewPosition = frag.NewPosition, frag.OldPosition
		rf.OldLines, rf.NewLines = frag.NewLines, frag.OldLines
		rf.LinesAdded, rf.LinesDeleted = frag.LinesDeleted, frag.LinesAdded
		rf.Lines = make([]gitdiff.Line, len(frag.Lines))
		for j, l := range frag.Lines {
			switch l.Op {
			case gitdiff.OpAdd:
				l.Op = gitdiff.OpDelete
			case gitdiff.OpDelete:
				l.Op = gitdiff.OpAdd
			}
			rf.Lines[j] = l
		}
		r.TextFragments[i] = &rf
	}
	return &r
}

// reversePatch returns the patch that undoes p (its files in reverse order).
func reversePatch(p patchFile) patchFile {
	r := patchFile{Name: p.Name, Digest: p.Digest, Files: make([]*gitdiff.File, len(p.Files)), reverse: true}
	for i, f := range p.Files {
		r.Files[len(p.Files)-1-i] = reverseFile(f)
	}
	return r
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
