package command

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/pyenv"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
	"github.com/sglprov/sglprov/pkg/treepack"
)

// VenvKind is the artifact type a pushing node's venv step publishes under its
// fingerprint: a record (its config) that the environment made in that folder travels
// with the Python steps that install into it, so another node's venv step leaves the
// folder to them.
const VenvKind = "application/vnd.sglprov.venv.v1"

// VenvDir returns the folder a venv step makes (INTERPRETER -m venv [OPTIONS] DIR), or ""
// when argv is not one.
func VenvDir(argv []string) string {
	if len(argv) < 4 || argv[1] != "-m" || argv[2] != "venv" {
		return ""
	}
	var dir string
	for _, a := range argv[3:] {
		if a == "--copies" {
			return "" // no link names the interpreter: not carried
		}
		if !strings.HasPrefix(a, "-") {
			if dir != "" {
				return "" // several folders
			}
			dir = a
		}
	}
	return dir
}

// venvOf is the venv folder an interpreter path is in (DIR/bin/python...), or "" when it
// is not in one.
func venvOf(python string) string {
	if filepath.Base(filepath.Dir(python)) != "bin" {
		return ""
	}
	dir := filepath.Dir(filepath.Dir(python))
	if _, err := os.Stat(filepath.Join(dir, "pyvenv.cfg")); err != nil {
		return ""
	}
	return dir
}

// venvRecord is a venv step's artifact config.
type venvRecord struct {
	Path string `json:"path"`
}

// deferVenv, for a venv step on a node with a fleet cache, reports whether the folder is
// left to the Python steps that need it: the cache holds the pushing node's record that
// the environment made there travels with them (VenvKind, the same folder), and the folder
// is not there yet. A Python step that finds no environment in the cache, and every other
// command step that needs this one, makes the venv first (ensureVenvs).
func (s *Step) deferVenv(ctx context.Context, env *engine.Env, slot engine.CacheSlot) bool {
	dir := VenvDir(s.spec.Argv)
	if dir == "" || env.Force || slot.Cache == nil || slot.Tag == "" {
		return false
	}
	dir = env.Path(dir)
	if _, err := os.Lstat(dir); err == nil {
		return false
	}
	a, err := slot.Lookup(ctx)
	if err != nil || a == nil || a.Kind != VenvKind {
		return false
	}
	var rec venvRecord
	if json.Unmarshal(a.Meta, &rec) != nil || rec.Path != dir {
		return false
	}
	if env.Log != nil {
		env.Log.Info("the venv is left to the Python steps: the fleet cache carries the environment made in it", "venv", dir, "record", a.Digest)
	}
	env.Detail("venv_deferred", a.Digest)
	return true
}

// publishVenv pushes a venv step's record (VenvKind) on a pushing node.
func (s *Step) publishVenv(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	dir := env.Path(VenvDir(s.spec.Argv))
	meta, err := json.Marshal(venvRecord{Path: dir})
	if err != nil {
		return "", err
	}
	base := filepath.Join(env.StateDir, "python")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("publishing the venv's record: %w", err)
	}
	f, err := os.CreateTemp(base, "venv-record-")
	if err != nil {
		return "", fmt.Errorf("publishing the venv's record: %w", err)
	}
	defer os.Remove(f.Name()) // made here
	if _, err := f.Write(meta); err != nil {
		f.Close()
		return "", fmt.Errorf("publishing the venv's record: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("publishing the venv's record: %w", err)
	}
	sum, size, err := cache.FileSHA256(f.Name())
	if err != nil {
		return "", err
	}
	a, err := slot.Cache.Push(ctx, slot.Tag, VenvKind, meta, []cache.File{{Name: "venv.json", Path: f.Name(), Size: size, SHA256: sum, Mode: 0o644}})
	if err != nil {
		return "", fmt.Errorf("publishing the venv's record: %w", err)
	}
	return a.Digest, nil
}

// ensureVenvs makes each venv that a needed venv step left to later steps (deferVenv) and
// that is not there yet, running that step's own argv.
func (s *Step) ensureVenvs(ctx context.Context, env *engine.Env, envList []string) error {
	for name, d := range env.Deps {
		vs, ok := d.(*Step)
		if !ok {
			continue
		}
		dir := VenvDir(vs.spec.Argv)
		if dir == "" {
			continue
		}
		dir = env.Path(dir)
		if _, err := os.Lstat(filepath.Join(dir, "pyvenv.cfg")); err == nil {
			continue
		}
		if env.Log != nil {
			env.Log.Info("making the venv that "+name+" left to this step", "argv", strings.Join(vs.spec.Argv, " "))
		}
		if err := stepexec.Exec(ctx, env, env.StepName, vs.spec.Argv, env.Path(vs.spec.Dir), envList); err != nil {
			return fmt.Errorf("making the venv of %s: %w", name, err)
		}
	}
	return nil
}

// envFromCache, for a Python step whose interpreter is in a venv, unpacks the environment
// a pushing node left after this step (pyenv.Tag of its fingerprint) in place of the venv,
// and reports whether it did. An environment made at another path or on another
// interpreter, or one that fails its checks, is said in the log and the report, and the
// step installs as it would without it.
func (s *Step) envFromCache(ctx context.Context, env *engine.Env, slot engine.CacheSlot) bool {
	if env.Force || slot.Cache == nil || slot.Tag == "" {
		return false
	}
	venv := venvDirOf(s.spec.Argv[0])
	if venv == "" {
		return false
	}
	var opt pyenv.Options
	if env.PythonLock != "" {
		l, err := readLock(env)
		if err != nil {
			return false
		}
		opt.Lock = l
	}
	opt.Progress = func(p treepack.Progress) {
		if env.Log != nil {
			env.Log.Info("pulling and unpacking the Python environment", "progress", p.String())
		}
	}
	a, _, err := pyenv.Restore(ctx, slot.Cache, pyenv.Tag(slot.Tag), venv, opt)
	if err == nil && a == nil {
		return false
	}
	if err != nil {
		if env.Log != nil {
			env.Log.Warn("not taking the Python environment from the cache; installing the lock", "cache", slot.Cache.String(), "why", err)
		}
		env.Detail("pyenv_fallback", err.Error())
		return false
	}
	env.FromCache(a.Digest)
	env.Detail("pyenv", a.Digest)
	if env.Log != nil {
		env.Log.Info("unpacked the Python environment from the cache", "artifact", a.Digest, "venv", venv)
	}
	return true
}

// venvDirOf is the venv folder of a Python step's interpreter (DIR/bin/python), whether or
// not it is there yet.
func venvDirOf(python string) string {
	if !filepath.IsAbs(python) || filepath.Base(filepath.Dir(python)) != "bin" {
		return ""
	}
	return filepath.Dir(filepath.Dir(python))
}

// publishEnv pushes, after a Python step ran on a pushing node, the environment it left
// (the venv its interpreter is in), tagged pyenv.Tag of its fingerprint. An interpreter
// outside a venv publishes none.
func publishEnv(ctx context.Context, env *engine.Env, slot engine.CacheSlot, python string, l *pylock.Lock) (string, error) {
	venv := venvOf(python)
	if venv == "" {
		return "", nil
	}
	tag := pyenv.Tag(slot.Tag)
	if a, err := slot.Cache.Lookup(ctx, tag); err != nil || a != nil {
		return "", err
	}
	a, err := pyenv.Publish(ctx, slot.Cache, tag, venv, filepath.Join(env.StateDir, "python"), l)
	if err != nil {
		return "", err
	}
	if env.Log != nil {
		env.Log.Info("pushed the Python environment", "artifact", a.Digest, "venv", venv, "tag", tag)
	}
	env.Detail("pyenv_pushed", a.Digest)
	return a.Digest, nil
}

// PublishesAfterGate implements engine.AfterGatePublisher: a Python step's environment
// and lock are pushed only once a gate that needs the step passed, so that an environment
// whose server failed its gate never reaches another node.
func (s *Step) PublishesAfterGate() bool { return PipInstall(s.spec.Argv) }
