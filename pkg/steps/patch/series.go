package patch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// patchFile is one patch of a series, read and parsed.
type patchFile struct {
	// Name is the name the series gives it.
	Name string
	// Digest is the sha256 of the patch file.
	Digest string
	// Files are the file diffs of the patch, in patch order.
	Files []*gitdiff.File
	// reverse marks the undo of a patch (applied exactly, never merged).
	reverse bool
}

// series is a parsed series file with its patches.
type series struct {
	Path    string
	Digest  string
	Patches []patchFile
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// seriesNames parses the text of a series file: one patch name a line; blank lines and
// lines starting with `#` are skipped, as is a ` #` comment after a name.
func seriesNames(data []byte) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("line %d: %q: one patch name a line (patch options are not supported)", n, line)
		}
		if !filepath.IsLocal(line) {
			return nil, fmt.Errorf("line %d: patch %q is not a path inside the series folder", n, line)
		}
		names = append(names, line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return names, nil
}

// loadSeries reads the series file at path and every patch it names (through read, which
// resolves recipe paths and "builtin:" names and checks permissions), and checks that no
// patch writes outside the tree.
func loadSeries(path string, read func(string) ([]byte, string, error)) (*series, error) {
	data, resolved, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("reading series: %w", err)
	}
	names, err := seriesNames(data)
	if err != nil {
		return nil, fmt.Errorf("series %s: %w: %w", resolved, err, exitcode.ErrUsage)
	}
	s := &series{Path: resolved, Digest: digest(data)}
	for _, name := range names {
		raw, file, err := read(engine.JoinRecipePath(path, name))
		if err != nil {
			return nil, fmt.Errorf("reading patch %q: %w", name, err)
		}
		files, err := parsePatch(raw)
		if err != nil {
			return nil, fmt.Errorf("patch %q (%s): %w: %w", name, file, err, exitcode.ErrUsage)
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("patch %q changes no file: %w", name, exitcode.ErrUsage)
		}
		if !bytes.Contains(raw, []byte("diff --git ")) {
			stripPrefixes(files)
		}
		for _, f := range files {
			for _, p := range []string{f.OldName, f.NewName} {
				if p == "" {
					continue
				}
				if !filepath.IsLocal(p) {
					return nil, fmt.Errorf("patch %q: path %q leaves the tree: %w", name, p, exitcode.ErrUsage)
				}
				if first, _, _ := strings.Cut(filepath.ToSlash(p), "/"); first == stageDir {
					return nil, fmt.Errorf("patch %q: path %q is inside %s, the folder the patch step writes through: %w", name, p, stageDir, exitcode.ErrUsage)
				}
			}
			if err := checkModes(f); err != nil {
				return nil, fmt.Errorf("patch %q: %w", name, err)
			}
		}
		s.Patches = append(s.Patches, patchFile{Name: name, Digest: digest(raw), Files: files})
	}
	return s, nil
}

// touched returns every tree path the series reads or writes, in first-seen order.
func (s *series) touched() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range s.Patches {
		for _, f := range p.Files {
			for _, name := range []string{f.OldName, f.NewName} {
				if name != "" && !seen[name] {
					seen[name] = true
					out = append(out, name)
				}
			}
		}
	}
	return out
}

// created returns the paths the series creates (new files, and rename or copy targets).
func (s *series) created() map[string]bool {
	out := map[string]bool{}
	for _, p := range s.Patches {
		for _, f := range p.Files {
			if f.IsNew || f.IsRename || f.IsCopy {
				out[f.NewName] = true
			}
		}
	}
	return out
}

// stripPrefixes drops the a/ and b/ folders that a plain `diff -ru a b` (or any diff made
// for `patch -p1`) puts before its names, as git's own format does for git diffs: a
// series may hold patches made either way. A name without its prefix is left as it is.
// (The parser may give both names the new side's spelling, so either prefix is dropped
// from either name.)
func stripPrefixes(files []*gitdiff.File) {
	strip := func(name string) string {
		for _, p := range []string{"a/", "b/"} {
			if rest, ok := strings.CutPrefix(name, p); ok && rest != "" {
				return rest
			}
		}
		return name
	}
	for _, f := range files {
		f.OldName, f.NewName = strip(f.OldName), strip(f.NewName)
	}
}

// checkModes refuses a file diff whose modes are neither a regular file's nor a symbolic
// link's (a submodule, a folder), and a new symbolic link whose target, as the patch
// gives it, is absolute or leaves the tree (apply checks the links on the disk too).
func checkModes(f *gitdiff.File) error {
	for _, m := range []fs.FileMode{f.OldMode, f.NewMode} {
		if t := gitType(m); t != 0 && t != gitRegular && t != gitSymlink {
			return fmt.Errorf("%s: mode %o is neither a regular file nor a symbolic link (patches change only those): %w", fileName(f), uint32(m), exitcode.ErrUsage)
		}
	}
	if gitType(f.NewMode) != gitSymlink || !f.IsNew && gitType(f.OldMode) == gitSymlink {
		return nil
	}
	target, err := applyContent(nil, f)
	if err != nil {
		return nil // apply reports it, at the hunk
	}
	if err := lexicalLinkTarget(f.NewName, string(target)); err != nil {
		return fmt.Errorf("%s: the symbolic link's target %q %v; patches make links only to paths inside the tree: %w", f.NewName, target, err, exitcode.ErrUsage)
	}
	return nil
}
