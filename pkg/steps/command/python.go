package command

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/pkg/steps/build"
)

// PipInstall reports whether argv is a Python step's: INTERPRETER -m pip install ...
func PipInstall(argv []string) bool {
	return len(argv) >= 4 && argv[1] == "-m" && argv[2] == "pip" && argv[3] == "install"
}

// ReportPath is where a Python step's pip writes its installation report (PIP_REPORT):
// what `sglprov lock` reads the wheels' digests from.
func ReportPath(stateDir, step string) string {
	return filepath.Join(stateDir, "python", step+".report.json")
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
	l, err := pylock.Read(env.PythonLock)
	if err != nil {
		return err
	}
	py := s.spec.Argv[0]
	index, editable := lockedArgs(s.spec.Argv[4:])
	if env.Log != nil {
		env.Log.Info("installing the Python lock", "lock", env.PythonLock, "packages", len(l.Packages), "editable", strings.Join(editable, " "))
	}
	if err := pylock.Install(ctx, py, l, pylock.InstallOptions{ByURL: true, PipArgs: index, Env: envList, Out: env.Out}); err != nil {
		return err
	}
	for _, e := range editable {
		argv := []string{py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-e", e}
		if err := build.Exec(ctx, env, env.StepName, argv, dir, envList); err != nil {
			return fmt.Errorf("installing %s (editable, after the lock): %w", e, err)
		}
	}
	return nil
}

// lockFingerprint is the fingerprint part of a locked Python step: the lock's digest.
func lockFingerprint(env *engine.Env) (map[string]string, error) {
	l, err := pylock.Read(env.PythonLock)
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
	p := ReportPath(env.StateDir, env.StepName)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", "", fmt.Errorf("making the folder of pip's report: %w", err)
	}
	return p, "PIP_REPORT=" + p, nil
}
