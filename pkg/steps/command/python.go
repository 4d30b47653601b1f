package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

// PipInstall reports whether argv is a Python step's: INTERPRETER -m pip install ...
func PipInstall(argv []string) bool {
	return len(argv) >= 4 && argv[1] == "-m" && argv[2] == "pip" && argv[3] == "install"
}

// ReportPath is where a Python step's pip writes its installation report (PIP_REPORT):
// what `sglprov pylock` reads the wheels' digests from. Each recipe has a folder of its own:
// two recipes in one state dir may name their steps alike.
func ReportPath(stateDir, recipe, step string) string {
	return filepath.Join(stateDir, "python", recipe, step+".report.json")
}

// pipValueFlags are the pip install options that take a value: the index ones are kept
// for a locked install (a wheel the lock records no URL for is found there), -e's value
// is installed again after the lock.
var pipValueFlags = map[string]bool{
	"-i": true, "--index-url": true, "--extra-index-url": true, "-f": true, "--find-links": true,
	"--trusted-host": true, "-e": true, "--editable": true, "-c": true, "--constraint": true,
	"-r": true, "--requirement": true, "-t": true, "--target": true, "--prefix": true, "--root": true,
	"--config-settings": true, "-C": true, "--platform": true, "--python-version": true,
	"--implementation": true, "--abi": true, "--upgrade-strategy": true, "--progress-bar": true,
	"--report": true, "--src": true, "--cache-dir": true, "--log": true, "--timeout": true, "--retries": true,
}

// indexFlags are the options kept for a locked install.
var indexFlags = map[string]bool{"-i": true, "--index-url": true, "--extra-index-url": true, "-f": true, "--find-links": true, "--trusted-host": true}

// lockedArgs splits a pip install's arguments into the index options and the editable
// folders.
func lockedArgs(args []string) (index, editable []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		flag, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "--") {
			flag, val, hasVal = a, "", false
		}
		if !hasVal && pipValueFlags[flag] && i+1 < len(args) {
			val = args[i+1]
			i++
		}
		switch {
		case indexFlags[flag]:
			index = append(index, flag, val)
		case flag == "-e" || flag == "--editable":
			editable = append(editable, val)
		}
	}
	return index, editable
}

// runLocked installs the recipe's python.lock in place of the step's own pip install:
// every wheel of the lock, from the URL it records (else from the step's index options),
// with --require-hashes --no-deps; then the step's editable folders, with --no-deps
// --no-build-isolation (their build needs are in the lock).
func (s *Step) runLocked(ctx context.Context, env *engine.Env, dir string, envList []string) error {
	l, err := readLock(env)
	if err != nil {
		return err
	}
	index, editable := lockedArgs(s.spec.Argv[4:])
	if env.Log != nil {
		env.Log.Info("installing the Python lock", "lock", env.PythonLock, "packages", len(l.Packages), "editable", strings.Join(editable, " "))
	}
	return s.installLock(ctx, env, l, pylock.InstallOptions{ByURL: true, PipArgs: index, Env: envList, Out: env.Out}, dir, envList)
}

// lockFingerprint is the fingerprint part of a locked Python step: the lock's digest.
func lockFingerprint(env *engine.Env) (map[string]string, error) {
	l, err := readLock(env)
	if err != nil {
		return nil, err
	}
	d, err := l.Digest()
	if err != nil {
		return nil, err
	}
	return map[string]string{"python.lock": d}, nil
}

// reportEnv prepares the report of an unlocked Python step and returns its PIP_REPORT
// entry for the environment.
func reportEnv(env *engine.Env) (string, string, error) {
	p := ReportPath(env.StateDir, env.RecipeName, env.StepName)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", "", fmt.Errorf("making the folder of pip's report: %w", err)
	}
	// pip writes a report of this run beside it; MergeReport folds it in afterwards.
	return p, "PIP_REPORT=" + p + ".new", nil
}

// RunCached is Run with the fleet cache: a Python step of a recipe without python.lock
// installs the lock that the first node to run it published under the step's fingerprint,
// its wheels taken from the registry (pip install --require-hashes --no-deps --no-index
// --find-links), and runs its own pip against the package index only when the cache has
// none or taking it fails (said in the log and the report). Other command steps run.
func (s *Step) RunCached(ctx context.Context, env *engine.Env, slot engine.CacheSlot) error {
	return s.run(ctx, env, &slot)
}

// fromCache installs the lock the cache holds for this step, and reports whether it did.
// With python.lock, the cache's lock must be that very lock (the same digest): only the
// wheels are taken from the registry.
func (s *Step) fromCache(ctx context.Context, env *engine.Env, slot engine.CacheSlot, dir string, envList []string) bool {
	if env.Force || slot.Cache == nil || slot.Tag == "" {
		return false
	}
	var want string
	if env.PythonLock != "" {
		l, err := readLock(env)
		if err != nil {
			return false
		}
		if want, err = l.Digest(); err != nil {
			return false
		}
	}
	base := filepath.Join(env.StateDir, "python")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return false
	}
	wheels, err := os.MkdirTemp(base, "wheels-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(wheels) // made here, holding only the wheels pulled into it
	l, a, err := pylock.FromCache(ctx, slot.Cache, slot.Tag, wheels)
	if err == nil && l == nil {
		return false
	}
	if err == nil && want != "" {
		if got, derr := l.Digest(); derr != nil || got != want {
			err = fmt.Errorf("the cache's lock for this step is %s, the recipe's python.lock %s", got, want)
		}
	}
	if err == nil {
		err = s.installLock(ctx, env, l, pylock.InstallOptions{WheelDir: wheels, Env: envList, Out: env.Out}, dir, envList)
	}
	if err != nil {
		if env.Log != nil {
			env.Log.Warn("cannot install the Python lock from the cache; taking the wheels from the index", "cache", slot.Cache.String(), "err", err)
		}
		env.Detail("cache_error", err.Error())
		return false
	}
	env.FromCache(a.Digest)
	if env.Log != nil {
		env.Log.Info("installed the Python lock from the cache", "artifact", a.Digest, "packages", len(l.Packages))
	}
	return true
}

// installLock installs l, then the step's editable folders.
func (s *Step) installLock(ctx context.Context, env *engine.Env, l *pylock.Lock, opt pylock.InstallOptions, dir string, envList []string) error {
	py := s.spec.Argv[0]
	_, editable := lockedArgs(s.spec.Argv[4:])
	if err := pylock.Install(ctx, py, l, opt); err != nil {
		return err
	}
	for _, e := range editable {
		argv := []string{py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-e", e}
		if err := stepexec.Exec(ctx, env, env.StepName, argv, dir, envList); err != nil {
			return fmt.Errorf("installing %s (editable, after the lock): %w", e, err)
		}
	}
	return nil
}

// Publish pushes, for a venv step on a pushing node, the record that the environment made
// in its folder travels with the Python steps (VenvKind); for a Python step that ran pip
// against the index on a pushing node, the environment it left (pyenv, publishEnv) and the
// lock of that environment (read from the environment and the reports of every
// Python step recorded in the state dir), or the recipe's python.lock, and its wheels
// (downloaded again from the URLs pip took them from, sha256 checked), tagged with the
// step's fingerprint. Other steps publish nothing.
func (s *Step) Publish(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	if VenvDir(s.spec.Argv) != "" {
		return s.publishVenv(ctx, env, slot)
	}
	if !PipInstall(s.spec.Argv) {
		return "", nil
	}
	digest, err := s.publishLock(ctx, env, slot)
	var l *pylock.Lock
	if env.PythonLock != "" {
		l, _ = readLock(env)
	}
	envDigest, envErr := publishEnv(ctx, env, slot, s.spec.Argv[0], l)
	if digest == "" {
		digest = envDigest
	}
	return digest, errors.Join(err, envErr)
}

// publishLock is Publish's lock artifact: the wheels of the environment's lock.
func (s *Step) publishLock(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	base := filepath.Dir(ReportPath(env.StateDir, env.RecipeName, env.StepName))
	if env.PythonLock != "" {
		l, err := readLock(env)
		if err != nil {
			return "", err
		}
		return publishLock(ctx, slot, l, base)
	}
	var rec record
	if !env.LoadData(&rec) || rec.PipReport == "" {
		return "", nil
	}
	reports, err := filepath.Glob(filepath.Join(base, "*.report.json"))
	if err != nil {
		return "", err
	}
	sort.Slice(reports, func(i, j int) bool { return modTime(reports[i]).Before(modTime(reports[j])) })
	site, err := pylock.SitePackages(ctx, s.spec.Argv[0])
	if err != nil {
		return "", err
	}
	l, err := pylock.Scan(site, reports)
	if err != nil {
		return "", err
	}
	return publishLock(ctx, slot, l, base)
}

// publishLock collects l's wheels into a temporary folder in base and pushes l with them.
func publishLock(ctx context.Context, slot engine.CacheSlot, l *pylock.Lock, base string) (string, error) {
	if len(l.Packages) == 0 {
		return "", nil
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("publishing the Python lock: %w", err)
	}
	wheels, err := os.MkdirTemp(base, "wheels-")
	if err != nil {
		return "", fmt.Errorf("publishing the Python lock: %w", err)
	}
	defer os.RemoveAll(wheels) // made here, holding only the wheels collected into it
	if err := pylock.Collect(ctx, l, wheels, fetch.Options{}); err != nil {
		return "", err
	}
	a, err := pylock.Publish(ctx, slot.Cache, slot.Tag, l, wheels)
	if err != nil {
		return "", err
	}
	return a.Digest, nil
}

// modTime is the file's modification time (zero when it cannot be read).
func modTime(p string) time.Time {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// readLock reads the recipe's python.lock as the recipe's other files are read: owned by
// root or the invoking user and writable by no one else (unless --insecure-permissions),
// a regular file of at most pylock.MaxLock bytes, never waited on (a FIFO is refused at
// once), then parsed and checked whole (pylock.Parse). A lock that is missing, untrusted
// or malformed is bad input (ErrUsage), with the fix.
func readLock(env *engine.Env) (*pylock.Lock, error) {
	l, err := parseLockFile(env)
	if err != nil {
		return nil, fmt.Errorf("python.lock: %w (write it with `sglprov pylock -f RECIPE` on a node whose Python steps ran against the index, or drop python.lock from the recipe): %w", err, exitcode.ErrUsage)
	}
	return l, nil
}

// parseLockFile reads and parses the lock file of env (see readLock).
func parseLockFile(env *engine.Env) (*pylock.Lock, error) {
	if !env.InsecurePermissions {
		if err := engine.CheckPermissions(env.PythonLock); err != nil {
			return nil, err
		}
	}
	b, err := engine.ReadTrusted(env.PythonLock, pylock.MaxLock)
	if err != nil {
		return nil, err
	}
	return pylock.Parse(b, env.PythonLock)
}

// Check refuses, for a Python step of a recipe with python.lock, a lock that is missing or
// malformed, on any machine (validate).
func (s *Step) Check(env *engine.Env) error {
	if !PipInstall(s.spec.Argv) || env.PythonLock == "" {
		return nil
	}
	_, err := readLock(env)
	return err
}

// PipSteps returns the names of recipe r's Python steps: its command steps whose argv is
// INTERPRETER -m pip install ... (PipInstall), read from the recipe's text (the interpreter
// may be a template; -m pip install never is).
func PipSteps(r *recipe.Recipe) []string {
	var out []string
	for _, s := range r.Steps {
		if s.Kind != "command" || s.Body == nil {
			continue
		}
		var spec struct {
			Argv []string `yaml:"argv"`
		}
		if s.Body.Decode(&spec) == nil && PipInstall(spec.Argv) {
			out = append(out, s.Name)
		}
	}
	return out
}
