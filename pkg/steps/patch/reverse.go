package patch

import (
	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

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
