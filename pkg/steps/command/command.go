// Package command is the command step kind: run a program (argv, never a shell string) in
// a directory with a set environment; the files it creates make it intact.
package command

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

// Spec is a command step's recipe body.
type Spec struct {
	// Argv is the program and its arguments.
	Argv []string `yaml:"argv"`
	// Dir is the working directory (a host path; relative to the recipe's folder, which is
	// also the default).
	Dir string `yaml:"dir"`
	// Env is added to the environment sglprov runs with.
	Env map[string]string `yaml:"env"`
	// Creates lists host paths the command makes (relative ones against the recipe's
	// folder); their presence (and, for files, their digest) makes the step intact.
	Creates []string `yaml:"creates"`
}

// Kind returns the command step kind.
func Kind() engine.Kind {
	return engine.KindOf(func(name string, s Spec) (*Step, error) {
		if len(s.Argv) == 0 || s.Argv[0] == "" {
			return nil, fmt.Errorf("command: argv must name a program: %w", exitcode.ErrUsage)
		}
		return &Step{spec: s}, nil
	})
}

// Step is a command step.
type Step struct {
	spec Spec
}

type record struct {
	// Created maps each path of creates to the sha256 of the file ("dir" for a directory).
	Created map[string]string `json:"created"`
	// Python and PipReport are a Python step's interpreter and the report its pip wrote
	// (unlocked steps only): `sglprov pylock` reads them.
	Python    string `json:"python,omitempty"`
	PipReport string `json:"pip_report,omitempty"`
	// VenvDeferred is set for a venv step that left its folder to the Python steps (the
	// fleet cache carries the environment made there).
	VenvDeferred bool `json:"venv_deferred,omitempty"`
}

// OfflineSkip is why a command does not run under --root: its program would run on this
// host, and what it writes (argv names the node's paths, not the root's) would land outside
// the root.
func (s *Step) OfflineSkip() string {
	return "offline (--root): a command runs its program on this host, where what it writes is not under the root; not run"
}

// Fingerprint adds nothing beyond the recipe text and the vars it uses; for a Python step
// of a recipe with python.lock, the lock's digest.
func (s *Step) Fingerprint(ctx context.Context, env *engine.Env) (map[string]string, error) {
	if PipInstall(s.spec.Argv) && env.PythonLock != "" {
		return lockFingerprint(env)
	}
	return nil, nil
}

// Intact reports whether every path of creates is there and unchanged.
func (s *Step) Intact(ctx context.Context, env *engine.Env) (bool, string, error) {
	var rec record
	env.LoadData(&rec)
	for _, p := range s.spec.Creates {
		sum, err := digestPath(env.Path(p))
		if errors.Is(err, fs.ErrNotExist) {
			return false, "outputs missing: " + p, nil
		}
		if err != nil {
			return false, "", fmt.Errorf("checking %s: %w", p, err)
		}
		if rec.Created[p] != sum {
			return false, "outputs changed: " + p, nil
		}
	}
	return true, "", nil
}

// Run runs the command as a build step runs its own (stepexec.Exec): output to the step log,
// the process group killed on cancel, the last lines in the error when it fails.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	return s.run(ctx, env, nil)
}

// run is Run; with slot (a fleet cache), a Python step without a lock first tries the lock
// the cache holds under its fingerprint (fromCache).
func (s *Step) run(ctx context.Context, env *engine.Env, slot *engine.CacheSlot) error {
	dir := env.Path(s.spec.Dir)
	envList := os.Environ()
	keys := make([]string, 0, len(s.spec.Env))
	for k := range s.spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		envList = append(envList, k+"="+s.spec.Env[k])
	}
	rec := record{Created: map[string]string{}}
	if slot != nil && VenvDir(s.spec.Argv) != "" && s.deferVenv(ctx, env, *slot) {
		rec.VenvDeferred = true
		return env.SaveData(rec)
	}
	fromEnv := PipInstall(s.spec.Argv) && slot != nil && s.envFromCache(ctx, env, *slot)
	if !fromEnv {
		if err := s.ensureVenvs(ctx, env, envList); err != nil {
			return err
		}
	}
	switch {
	case fromEnv:
		rec.Python = s.spec.Argv[0]
	case PipInstall(s.spec.Argv) && env.PythonLock != "":
		if slot != nil && s.fromCache(ctx, env, *slot, dir, envList) {
			break
		}
		if err := s.runLocked(ctx, env, dir, envList); err != nil {
			return err
		}
	case PipInstall(s.spec.Argv) && slot != nil && s.fromCache(ctx, env, *slot, dir, envList):
		rec.Python = s.spec.Argv[0]
	default:
		if PipInstall(s.spec.Argv) {
			report, kv, err := reportEnv(env)
			if err != nil {
				return err
			}
			envList = append(envList, kv)
			rec.Python, rec.PipReport = s.spec.Argv[0], report
		}
		if env.Log != nil {
			env.Log.Info("running command", "argv", strings.Join(s.spec.Argv, " "))
		}
		if err := stepexec.Exec(ctx, env, env.StepName, s.spec.Argv, dir, envList); err != nil {
			return err
		}
		if rec.PipReport != "" {
			if err := pylock.MergeReport(rec.PipReport, rec.PipReport+".new"); err != nil {
				return err
			}
		}
	}
	for _, p := range s.spec.Creates {
		sum, err := digestPath(env.Path(p))
		if err != nil {
			return fmt.Errorf("command ran but did not create %s: %w", p, err)
		}
		rec.Created[p] = sum
	}
	return env.SaveData(rec)
}

func digestPath(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if st.IsDir() {
		return "dir", nil
	}
	if !st.Mode().IsRegular() {
		// A FIFO or device is never opened (a FIFO waits for a writer): its type stands
		// for its content.
		return "type " + st.Mode().Type().String(), nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
