package command

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// TestLockedStepRefusesABadLock: a Python step of a recipe whose python.lock is missing or
// malformed is bad input (exit 2) in validate's Check and in the fingerprint, with the
// fix; other command steps do not read the lock.
func TestLockedStepRefusesABadLock(t *testing.T) {
	dir := t.TempDir()
	env := engine.NewTestEnv(dir, nil)
	pip, _ := Kind().New("deps", &Spec{Argv: []string{"/venv/bin/python", "-m", "pip", "install", "alpha"}})
	other, _ := Kind().New("mk", &Spec{Argv: []string{"true"}})
	for name, content := range map[string]string{"missing": "", "malformed": `{"version":1,"packages":[{"name":"a"}]}`} {
		env.PythonLock = filepath.Join(dir, name+".lock.json")
		if content != "" {
			os.WriteFile(env.PythonLock, []byte(content), 0o644)
		}
		err := pip.(engine.Checker).Check(env)
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "sglprov lock -f RECIPE") {
			t.Errorf("%s lock, Check: %v; want a usage error with the fix", name, err)
		}
		if _, err := pip.Fingerprint(context.Background(), env); !errors.Is(err, exitcode.ErrUsage) {
			t.Errorf("%s lock, Fingerprint: %v; want a usage error", name, err)
		}
		if err := other.(engine.Checker).Check(env); err != nil {
			t.Errorf("a step that is no pip install read the lock: %v", err)
		}
	}
}

// TestLockedArgs: a locked install keeps the step's index options and installs its
// editable folders again; requirements, constraints and other options are the lock's
// business.
func TestLockedArgs(t *testing.T) {
	index, editable := lockedArgs([]string{"--extra-index-url", "https://x/cu130", "-c", "/c.txt",
		"scikit-build-core", "--index-url=https://pypi/simple", "-e", "/opt/sglang/python", "--editable=/opt/other", "-U", "torch==2.9.1"})
	if want := []string{"--extra-index-url", "https://x/cu130", "--index-url", "https://pypi/simple"}; !slices.Equal(index, want) {
		t.Errorf("index options %q, want %q", index, want)
	}
	if want := []string{"/opt/sglang/python", "/opt/other"}; !slices.Equal(editable, want) {
		t.Errorf("editable %q, want %q", editable, want)
	}
}
