// Package pyenv carries a Python environment (a venv, as its steps installed it: modes,
// links, scripts, bytecode) through the fleet cache as one artifact, so that another node
// unpacks it instead of making a venv and installing its wheels. The lock stays the
// record: the artifact's config names the environment's distributions and versions (read
// from its dist-infos), the unpacked tree is checked against them and against the lock,
// and a node whose path or interpreter differs (a venv's scripts and links name both) is
// told why and installs from the lock instead.
package pyenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/pkg/treepack"
)

// Kind is the artifact type of a Python environment in the fleet cache: its config is
// Meta, its layers the tree (treepack).
const Kind = "application/vnd.sglprov.pyenv.v1"

// maxMeta bounds an artifact's config.
const maxMeta = 4 << 20

// Meta is what an environment artifact says of itself.
type Meta struct {
	// Version is the format's version (1).
	Version int `json:"version"`
	// Path is the environment's folder on the node that made it: its scripts and
	// pyvenv.cfg name it, so it is unpacked only there.
	Path string `json:"path"`
	// Python is the interpreter the environment's links name (absolute), PythonVersion
	// its version (X.Y.Z).
	Python        string `json:"python"`
	PythonVersion string `json:"python_version"`
	// SitePackages is the site-packages folder, relative to Path.
	SitePackages string `json:"site_packages"`
	// Packages maps each distribution's normalized name to its version (dist-infos).
	Packages map[string]string `json:"packages"`
	// Files, Links, Dirs and Bytes are the tree's size.
	Files int   `json:"files"`
	Links int   `json:"links"`
	Dirs  int   `json:"dirs"`
	Bytes int64 `json:"bytes"`
}

// Tag is the environment artifact's tag for a Python step whose fingerprint is stepTag
// (the step's lock artifact has stepTag itself).
func Tag(stepTag string) string {
	t := "pyenv-" + stepTag
	if len(t) > 128 {
		s := sha256.Sum256([]byte(stepTag))
		t = "pyenv-" + hex.EncodeToString(s[:])
	}
	return t
}

// FallbackError says why this node cannot take the environment artifact as it is (its
// path or its interpreter differs): the caller installs from the lock instead.
type FallbackError struct{ Reason string }

func (e *FallbackError) Error() string { return e.Reason }

// Describe reads the environment at venv: its interpreter (the absolute target of its
// bin/ links), that interpreter's version, its site-packages and distributions.
func Describe(ctx context.Context, venv string) (*Meta, error) {
	m := &Meta{Version: 1, Path: venv}
	ents, err := os.ReadDir(filepath.Join(venv, "bin"))
	if err != nil {
		return nil, fmt.Errorf("reading the environment %s: %w", venv, err)
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		t, err := os.Readlink(filepath.Join(venv, "bin", e.Name()))
		if err != nil || !filepath.IsAbs(t) {
			continue
		}
		if m.Python != "" && m.Python != t {
			return nil, fmt.Errorf("reading the environment %s: its links name two interpreters, %s and %s", venv, m.Python, t)
		}
		m.Python = t
	}
	if m.Python == "" {
		return nil, fmt.Errorf("reading the environment %s: no link in bin/ names its interpreter (a venv made with --copies is not carried)", venv)
	}
	if m.PythonVersion, err = pythonVersion(ctx, m.Python); err != nil {
		return nil, err
	}
	sites, _ := filepath.Glob(filepath.Join(venv, "lib", "python*", "site-packages"))
	if len(sites) != 1 {
		return nil, fmt.Errorf("reading the environment %s: %d site-packages folders, want 1", venv, len(sites))
	}
	rel, _ := filepath.Rel(venv, sites[0])
	m.SitePackages = filepath.ToSlash(rel)
	if m.Packages, err = distributions(sites[0]); err != nil {
		return nil, err
	}
	return m, nil
}

// distributions reads the name and version of each dist-info in site.
func distributions(site string) (map[string]string, error) {
	l, err := pylock.Scan(site, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range l.Packages {
		out[p.Name] = p.Version
	}
	for _, p := range l.Local {
		out[p.Name] = p.Version
	}
	return out, nil
}

// pythonVersion asks the interpreter for its version, within 30 s.
func pythonVersion(ctx context.Context, python string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("asking %s for its version: %w", python, err)
	}
	v := strings.TrimSpace(out.String())
	if len(v) > 32 {
		return "", fmt.Errorf("asking %s for its version: it said %.32q", python, v)
	}
	return v, nil
}

// checkLock refuses an environment that lacks a package of l or has another version.
func checkLock(pkgs map[string]string, l *pylock.Lock) error {
	if l == nil {
		return nil
	}
	for _, p := range l.Packages {
		if v, ok := pkgs[p.Name]; !ok {
			return fmt.Errorf("the environment lacks %s %s, which the lock names", p.Name, p.Version)
		} else if v != p.Version {
			return fmt.Errorf("the environment holds %s %s, the lock %s", p.Name, v, p.Version)
		}
	}
	return nil
}

// Publish packs the environment at venv (layers written into work, removed after) and
// pushes it tagged tag, its Meta as the config. With l, the environment must hold every
// package of l at its version.
func Publish(ctx context.Context, c cache.Cache, tag, venv, work string, l *pylock.Lock) (*cache.Artifact, error) {
	m, err := Describe(ctx, venv)
	if err != nil {
		return nil, fmt.Errorf("publishing the Python environment: %w", err)
	}
	if err := checkLock(m.Packages, l); err != nil {
		return nil, fmt.Errorf("publishing the Python environment: %w", err)
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, fmt.Errorf("publishing the Python environment: %w", err)
	}
	dir, err := os.MkdirTemp(work, "pyenv-")
	if err != nil {
		return nil, fmt.Errorf("publishing the Python environment: %w", err)
	}
	defer os.RemoveAll(dir) // made here, holding only the layers written into it
	layers, st, err := treepack.Pack(ctx, venv, dir, treepack.PackOptions{AllowLink: allowInterpreter(m.Python)})
	if err != nil {
		return nil, fmt.Errorf("publishing the Python environment: %w", err)
	}
	m.Files, m.Links, m.Dirs, m.Bytes = st.Files, st.Links, st.Dirs, st.Bytes
	meta, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	a, err := c.Push(ctx, tag, Kind, meta, layers)
	if err != nil {
		return nil, fmt.Errorf("publishing the Python environment: %w", err)
	}
	return a, nil
}

// allowInterpreter allows the links in bin/ to the environment's interpreter, and no
// other link out of the tree.
func allowInterpreter(python string) func(name, target string) bool {
	return func(name, target string) bool {
		return path.Dir(name) == "bin" && target == python
	}
}

// Options tune Restore.
type Options struct {
	// Lock, when set, is the lock the environment must match (names and versions).
	Lock *pylock.Lock
	// Progress receives the pull's and unpack's progress.
	Progress func(treepack.Progress)
	// StallTimeout is the layers' stall timeout (default: treepack's).
	StallTimeout time.Duration
}

// Restore looks up the environment tagged tag and unpacks it at venv: beside it first,
// every layer's digest checked, its distributions checked against the artifact's own list
// and against opt.Lock, then renamed into place (a venv that was there is replaced). It
// returns nils when the cache has no such artifact, and a *FallbackError when the
// artifact was made for another path or interpreter than this node's.
func Restore(ctx context.Context, c cache.Cache, tag, venv string, opt Options) (*cache.Artifact, *Meta, error) {
	a, err := c.Lookup(ctx, tag)
	if err != nil || a == nil {
		return nil, nil, err
	}
	if a.Kind != Kind {
		return nil, nil, fmt.Errorf("the artifact %s is a %s, not a Python environment", a.Digest, a.Kind)
	}
	if len(a.Meta) > maxMeta {
		return nil, nil, fmt.Errorf("the artifact %s: its config is over %d bytes", a.Digest, maxMeta)
	}
	var m Meta
	if err := json.Unmarshal(a.Meta, &m); err != nil {
		return nil, nil, fmt.Errorf("reading the artifact %s: %w", a.Digest, err)
	}
	if m.Version != 1 || m.Python == "" || !filepath.IsAbs(m.Python) || m.SitePackages == "" || path.Clean(m.SitePackages) != m.SitePackages || strings.HasPrefix(m.SitePackages, "..") || path.IsAbs(m.SitePackages) {
		return nil, nil, fmt.Errorf("reading the artifact %s: not a Python environment's record (version %d, python %q, site-packages %q)", a.Digest, m.Version, m.Python, m.SitePackages)
	}
	if m.Path != venv {
		return a, &m, &FallbackError{Reason: fmt.Sprintf("the environment in %s was made at %s, this node's is at %s (its scripts name their folder)", a.Digest, m.Path, venv)}
	}
	v, err := pythonVersion(ctx, m.Python)
	if err != nil {
		return a, &m, &FallbackError{Reason: fmt.Sprintf("the environment in %s runs on %s, which this node cannot run: %v", a.Digest, m.Python, err)}
	}
	if v != m.PythonVersion {
		return a, &m, &FallbackError{Reason: fmt.Sprintf("the environment in %s runs on %s %s, this node's %s is %s", a.Digest, m.Python, m.PythonVersion, m.Python, v)}
	}
	if err := checkLock(m.Packages, opt.Lock); err != nil {
		return a, &m, &FallbackError{Reason: fmt.Sprintf("the environment in %s is not the lock's: %v", a.Digest, err)}
	}
	check := func(tree string) error {
		got, err := distributions(filepath.Join(tree, filepath.FromSlash(m.SitePackages)))
		if err != nil {
			return fmt.Errorf("checking the unpacked environment: %w", err)
		}
		if err := sameDistributions(got, m.Packages); err != nil {
			return fmt.Errorf("checking the unpacked environment of %s: %w", a.Digest, err)
		}
		return checkLock(got, opt.Lock)
	}
	_, err = treepack.Unpack(ctx, treepack.Registry{Cache: c}, a.Files, venv, treepack.UnpackOptions{
		MaxBytes: m.Bytes, MaxFiles: m.Files + m.Links + m.Dirs, AllowLink: allowInterpreter(m.Python),
		Progress: opt.Progress, StallTimeout: opt.StallTimeout, Check: check,
	})
	if err != nil {
		return a, &m, fmt.Errorf("unpacking the Python environment %s: %w", a.Digest, err)
	}
	return a, &m, nil
}

// sameDistributions refuses two lists that differ, naming the first difference.
func sameDistributions(got, want map[string]string) error {
	names := make([]string, 0, len(got)+len(want))
	for n := range got {
		names = append(names, n)
	}
	for n := range want {
		if _, ok := got[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		g, gok := got[n]
		w, wok := want[n]
		switch {
		case !gok:
			return fmt.Errorf("it lacks %s %s, which its record names", n, w)
		case !wok:
			return fmt.Errorf("it holds %s %s, which its record does not name", n, g)
		case g != w:
			return fmt.Errorf("it holds %s %s, its record says %s", n, g, w)
		}
	}
	return nil
}

// IsFallback reports whether err is a *FallbackError.
func IsFallback(err error) bool {
	var f *FallbackError
	return errors.As(err, &f)
}
