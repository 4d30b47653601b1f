package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
)

// cacheMeta is the config of a build step's artifact in the fleet cache.
type cacheMeta struct {
	Step    string   `json:"step"`
	Argv    []string `json:"argv"`
	Outputs []string `json:"outputs"`
}

// Restore takes the build's outputs from the fleet cache: the artifact tagged with the
// step's fingerprint is pulled into a folder in the state dir (every layer's size and
// sha256 checked), and each file renamed (or, across file systems, copied) into place. A file the artifact names must be
// one the step's outputs globs match; anything else refuses the artifact.
func (s *Step) Restore(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, bool, error) {
	if len(s.spec.Outputs) == 0 || slot.Cache == nil || slot.Tag == "" {
		return "", false, nil
	}
	a, err := slot.Cache.Lookup(ctx, slot.Tag)
	if err != nil || a == nil {
		return "", false, err
	}
	if a.Kind != cache.KindBuild {
		return "", false, fmt.Errorf("artifact %s is a %q, not a build's outputs", a.Digest, a.Kind)
	}
	if len(a.Files) == 0 {
		return "", false, fmt.Errorf("artifact %s has no files", a.Digest)
	}
	dests, err := s.restoreDests(env, a)
	if err != nil {
		return "", false, err
	}
	rec, err := s.pullOutputs(ctx, env, slot, a, dests)
	if err != nil {
		return "", false, err
	}
	if err := env.SaveData(rec); err != nil {
		return "", false, fmt.Errorf("recording outputs: %w", err)
	}
	paths := make([]string, len(rec.Outputs))
	for i, o := range rec.Outputs {
		paths[i] = o.Path
	}
	env.Detail("outputs", paths)
	env.Detail("artifact", a.Digest)
	return a.Digest, true, nil
}

// restoreDests returns where each file of the artifact goes, refusing an artifact that
// names a path twice or lacks an output of the step.
func (s *Step) restoreDests(env *engine.Env, a *cache.Artifact) ([]string, error) {
	dir := s.dir(env)
	dests := make([]string, len(a.Files))
	seen := map[string]bool{}
	for i, f := range a.Files {
		var err error
		if dests[i], err = s.restorePath(env, dir, f.Name); err != nil {
			return nil, fmt.Errorf("artifact %s: %w", a.Digest, err)
		}
		if seen[dests[i]] {
			return nil, fmt.Errorf("artifact %s names %s twice", a.Digest, f.Name)
		}
		seen[dests[i]] = true
	}
	// Every output of the step must come from the artifact: one it lacks would be
	// recorded from whatever the tree holds, or fail the restore half done.
	for _, g := range s.spec.Outputs {
		pat := s.outputPath(env, dir, g)
		found := false
		for _, d := range dests {
			if ok, _ := filepath.Match(pat, d); ok {
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("the artifact %s lacks %s, an output of the step; the tree is left as it was", a.Digest, g)
		}
	}
	return dests, nil
}

// pullOutputs pulls the artifact's files into a folder in the state dir and places each
// at its dest, all or none, and returns the record of the outputs placed.
func (s *Step) pullOutputs(ctx context.Context, env *engine.Env, slot engine.CacheSlot, a *cache.Artifact, dests []string) (record, error) {
	// The pull is staged in the state dir, not in the source tree: a pull killed half way
	// leaves nothing in the tree that its fingerprint would see.
	if err := os.MkdirAll(env.StateDir, 0o700); err != nil {
		return record{}, fmt.Errorf("creating the state dir: %w", err)
	}
	stage, err := os.MkdirTemp(env.StateDir, "cache-pull-")
	if err != nil {
		return record{}, fmt.Errorf("creating a folder for the pull: %w", err)
	}
	defer os.RemoveAll(stage)
	pulled := *a
	pulled.Files = make([]cache.File, len(a.Files))
	for i, f := range a.Files {
		f.Name = fmt.Sprintf("%d/%s", i, path.Base(f.Name))
		pulled.Files[i] = f
	}
	env.Log.Info("pulling the outputs from the cache", "artifact", a.Digest, "files", len(a.Files))
	if err := slot.Cache.Pull(ctx, &pulled, stage); err != nil {
		return record{}, err
	}
	known := map[string]string{}
	var tx restoreTx
	for i, f := range pulled.Files {
		src := filepath.Join(stage, filepath.FromSlash(f.Name))
		if err := tx.place(src, dests[i]); err != nil {
			tx.undo()
			return record{}, fmt.Errorf("restoring %s: %w; the tree is left as it was", dests[i], err)
		}
		known[dests[i]] = f.SHA256
	}
	rec, err := s.recordOutputsKnown(env, known)
	if err != nil {
		tx.undo()
		return record{}, fmt.Errorf("%w; the tree is left as it was", err)
	}
	tx.commit()
	return rec, nil
}

// Publish pushes the outputs the last run recorded as one artifact tagged with the
// step's fingerprint.
func (s *Step) Publish(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	var rec record
	if len(s.spec.Outputs) == 0 || !env.LoadData(&rec) || len(rec.Outputs) == 0 {
		return "", nil
	}
	dir := s.dir(env)
	meta := cacheMeta{Step: s.name, Argv: s.spec.Argv}
	var files []cache.File
	for _, o := range rec.Outputs {
		name, err := artifactName(env, dir, o.Path)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(o.Path)
		if err != nil {
			return "", fmt.Errorf("reading output: %w", err)
		}
		files = append(files, cache.File{Name: name, Path: o.Path, Size: o.Size, SHA256: o.SHA256, Mode: fi.Mode().Perm()})
		meta.Outputs = append(meta.Outputs, name)
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return "", fmt.Errorf("encoding the artifact's config: %w", err)
	}
	a, err := slot.Cache.Push(ctx, slot.Tag, cache.KindBuild, b, files)
	if err != nil {
		return "", err
	}
	return a.Digest, nil
}

// artifactName is an output's name in the artifact: its path relative to the build
// folder, or, outside it, its absolute host path (without --root).
func artifactName(env *engine.Env, dir, p string) (string, error) {
	if rel, err := filepath.Rel(dir, p); err == nil && rel != "." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && rel != ".." {
		return filepath.ToSlash(rel), nil
	}
	abs := p
	if root := env.Root; root != "" && root != "/" {
		rel, err := filepath.Rel(root, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return "", fmt.Errorf("output %s is outside the root %s", p, root)
		}
		abs = "/" + rel
	}
	return filepath.ToSlash(abs), nil
}

// restorePath maps an artifact's file name to its path on this machine, and checks that
// the step's outputs globs match it.
func (s *Step) restorePath(env *engine.Env, dir, name string) (string, error) {
	var p string
	switch {
	case name == "" || strings.Contains(name, "\x00"):
		return "", fmt.Errorf("a file has the name %q", name)
	case path.IsAbs(name):
		if path.Clean(name) != name {
			return "", fmt.Errorf("file name %q is not clean", name)
		}
		p = env.HostPath(filepath.FromSlash(name))
	default:
		if c := path.Clean(name); c != name || c == ".." || strings.HasPrefix(c, "../") {
			return "", fmt.Errorf("file name %q leaves the build folder", name)
		}
		p = filepath.Join(dir, filepath.FromSlash(name))
	}
	for _, g := range s.spec.Outputs {
		if ok, _ := filepath.Match(s.outputPath(env, dir, g), p); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("file %q is not one of the step's outputs (%s)", name, strings.Join(s.spec.Outputs, ", "))
}

// restoreTx places restored files so that a restore that fails half way can put the
// tree back as it was: a file it replaces is kept aside (renamed beside it) until the
// restore is done, and the folders it creates are removed again.
type restoreTx struct {
	placed []placedFile
}

type placedFile struct {
	dst, backup string
	moved       bool     // src was (or was being) moved to dst
	created     []string // folders made for dst, deepest first
}

// place moves src to dst, keeping what dst was.
func (tx *restoreTx) place(src, dst string) error {
	p := placedFile{dst: dst}
	for d := filepath.Dir(dst); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		p.created = append(p.created, d)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		tx.placed = append(tx.placed, p)
		return err
	}
	if _, err := os.Lstat(dst); err == nil {
		// A name of its own beside dst (same file system), taken by creating it.
		tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".before-restore-")
		if err != nil {
			tx.placed = append(tx.placed, p)
			return err
		}
		tmp.Close()
		if err := os.Rename(dst, tmp.Name()); err != nil {
			_ = os.Remove(tmp.Name())
			tx.placed = append(tx.placed, p)
			return err
		}
		p.backup = tmp.Name()
	}
	p.moved = true
	tx.placed = append(tx.placed, p)
	return moveFile(src, dst)
}

// undo removes what was placed and puts back what was there, newest first.
func (tx *restoreTx) undo() {
	for i := len(tx.placed) - 1; i >= 0; i-- {
		p := tx.placed[i]
		if p.moved {
			_ = os.Remove(p.dst)
		}
		if p.backup != "" {
			_ = os.Rename(p.backup, p.dst)
		}
		for _, d := range p.created {
			_ = os.Remove(d)
		}
	}
	tx.placed = nil
}

// commit drops what was kept aside.
func (tx *restoreTx) commit() {
	for _, p := range tx.placed {
		if p.backup != "" {
			_ = os.Remove(p.backup)
		}
	}
	tx.placed = nil
}

// moveFile renames src to dst, or copies it (fsynced, then renamed) across file systems.
func moveFile(src, dst string) error {
	err := os.Rename(src, dst)
	if err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(dst))
}
