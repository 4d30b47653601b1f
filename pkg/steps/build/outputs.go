package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/sglprov/sglprov/pkg/engine"
)

// record is what a successful build saves in the state (env.SaveData).
type record struct {
	Outputs []outputRecord `json:"outputs"`
}

// outputRecord is one file an output glob matched after the build.
//
// Intact compares size and modification time first and re-hashes a file only when one of
// them differs (or with --verify): a wheel of several hundred MB would otherwise be read on
// every plan. A touched but unchanged file is still intact, since the hash decides then.
type outputRecord struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
}

// outputPath maps an output glob to a glob on this machine.
func (s *Step) outputPath(env *engine.Env, dir, g string) string {
	if filepath.IsAbs(g) {
		return env.Path(g)
	}
	return filepath.Join(dir, g)
}

// matchOutputs returns the files each output glob matches, sorted; missing names the first
// glob that matches nothing ("" when each matched).
func (s *Step) matchOutputs(env *engine.Env) (files []string, missing string, err error) {
	dir := s.dir(env)
	seen := map[string]bool{}
	for _, g := range s.spec.Outputs {
		matches, err := filepath.Glob(s.outputPath(env, dir, g))
		if err != nil {
			return nil, "", fmt.Errorf("matching output %q: %w", g, err)
		}
		var regular []string
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.Mode().IsRegular() {
				regular = append(regular, m)
			}
		}
		if len(regular) == 0 {
			return nil, g, nil
		}
		for _, m := range regular {
			if !seen[m] {
				seen[m] = true
				files = append(files, m)
			}
		}
	}
	sort.Strings(files)
	return files, "", nil
}

// Intact reports whether every output glob still matches files, and the matched files are
// the ones the last successful build recorded, unchanged.
func (s *Step) Intact(ctx context.Context, env *engine.Env) (bool, string, error) {
	if len(s.spec.Outputs) == 0 {
		return true, "", nil
	}
	files, missing, err := s.matchOutputs(env)
	if err != nil {
		return false, "", err
	}
	if missing != "" {
		return false, "outputs missing: " + missing, nil
	}
	var rec record
	if !env.LoadData(&rec) {
		return false, "no record of the outputs of an earlier build", nil
	}
	byPath := map[string]outputRecord{}
	for _, o := range rec.Outputs {
		byPath[o.Path] = o
	}
	for _, o := range rec.Outputs {
		if _, err := os.Stat(o.Path); err != nil {
			return false, "outputs missing: " + o.Path, nil
		}
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return false, "", err
		}
		want, ok := byPath[f]
		if !ok {
			return false, "outputs changed: " + f + " (not made by the last build)", nil
		}
		fi, err := os.Stat(f)
		if err != nil {
			return false, "outputs missing: " + f, nil
		}
		if !env.Verify && fi.Size() == want.Size && fi.ModTime().UnixNano() == want.ModTime {
			continue
		}
		sum, err := fileSHA256(f)
		if err != nil {
			return false, "", err
		}
		if sum != want.SHA256 {
			return false, "outputs changed: " + f, nil
		}
	}
	return true, "", nil
}

// recordOutputs digests the files the outputs match after a successful build.
func (s *Step) recordOutputs(env *engine.Env) (record, error) {
	return s.recordOutputsKnown(env, nil)
}

// recordOutputsKnown is recordOutputs with the sha256 of some files already known (just
// pulled and checked): those are not read again.
func (s *Step) recordOutputsKnown(env *engine.Env, known map[string]string) (record, error) {
	var rec record
	if len(s.spec.Outputs) == 0 {
		return rec, nil
	}
	files, missing, err := s.matchOutputs(env)
	if err != nil {
		return rec, err
	}
	if missing != "" {
		return rec, fmt.Errorf("the build succeeded but made no file matching output %q", missing)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return rec, fmt.Errorf("reading output: %w", err)
		}
		sum, ok := known[f]
		if !ok {
			if sum, err = fileSHA256(f); err != nil {
				return rec, err
			}
		}
		rec.Outputs = append(rec.Outputs, outputRecord{Path: f, Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), SHA256: sum})
	}
	return rec, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("hashing file: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
