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
	dir := s.dir(env)
	dests := make([]string, len(a.Files))
	for i, f := range a.Files {
		if dests[i], err = s.restorePath(env, dir, f.Name); err != nil {
			return "", false, fmt.Errorf("artifact %s: %w", a.Digest, err)
		}
	}
	// The pull is staged in the state dir, not in the source tree: a pull killed half way
	// leaves nothing in the tree that its fingerprint would see.
	if err := os.MkdirAll(env.StateDir, 0o700); err != nil {
		return "", false, fmt.Errorf("creating the state dir: %w", err)
	}
	stage, err := os.MkdirTemp(env.StateDir, "cache-pull-")
	if err != nil {
		return "", false, fmt.Errorf("creating a folder for the pull: %w", err)
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
		return "", false, err
	}
	known := map[string]string{}
	for i, f := range pulled.Files {
		src := filepath.Join(stage, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(dests[i]), 0o755); err != nil {
			return "", false, fmt.Errorf("restoring %s: %w", dests[i], err)
		}
		if err := moveFile(src, dests[i]); err != nil {
			return "", false, fmt.Errorf("restoring %s: %w", dests[i], err)
		}
		known[dests[i]] = f.SHA256
	}
	rec, err := s.recordOutputsKnown(env, known)
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
