package command

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/pylock"
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
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "sglprov pylock -f RECIPE") {
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

// TestLockedStepReadsTheLockAsARecipeFile: python.lock is read as the recipe's other files
// are: one that others can write is refused (exit 2, the fix named) unless
// --insecure-permissions, one larger than the bound is refused, and a FIFO is refused at
// once, never waited on.
func TestLockedStepReadsTheLockAsARecipeFile(t *testing.T) {
	dir := t.TempDir()
	env := engine.NewTestEnv(dir, nil)
	pip, _ := Kind().New("deps", &Spec{Argv: []string{"/venv/bin/python", "-m", "pip", "install", "alpha"}})
	check := func() error { return pip.(engine.Checker).Check(env) }

	env.PythonLock = filepath.Join(dir, "open.lock.json")
	os.WriteFile(env.PythonLock, []byte(`{"version":1,"packages":[]}`), 0o644)
	if err := check(); err != nil {
		t.Fatalf("a good lock: %v", err)
	}
	os.Chmod(env.PythonLock, 0o666)
	if err := check(); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("a lock others can write: %v; want it refused with the fix", err)
	}
	env.InsecurePermissions = true
	if err := check(); err != nil {
		t.Errorf("a lock others can write, --insecure-permissions: %v", err)
	}

	env.PythonLock = filepath.Join(dir, "big.lock.json")
	os.WriteFile(env.PythonLock, []byte(`{"version":1,"packages":[]}`), 0o644)
	if err := os.Truncate(env.PythonLock, pylock.MaxLock+1); err != nil { // sparse, over the bound: refused by its size, unread
		t.Fatal(err)
	}
	if err := check(); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "more than the limit") {
		t.Errorf("a lock over the bound: %v; want it refused", err)
	}

	env.PythonLock = filepath.Join(dir, "fifo.lock.json")
	if err := syscall.Mkfifo(env.PythonLock, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- check() }()
	select {
	case err := <-done:
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("a FIFO lock: %v; want it refused as a FIFO", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO as the lock waits for a writer")
	}
}

// TestPipStepPublishesAfterGate: a pip step's environment and lock wait for the gate
// (engine.AfterGatePublisher); a venv step's record and any other command do not.
func TestPipStepPublishesAfterGate(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{"/opt/venv/bin/python", "-m", "pip", "install", "torch"}, true},
		{[]string{"python3", "-m", "venv", "/opt/venv"}, false},
		{[]string{"sh", "-c", "true"}, false},
	} {
		s, err := Kind().New("x", &Spec{Argv: c.argv})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := s.(engine.AfterGatePublisher)
		if !ok || p.PublishesAfterGate() != c.want {
			t.Errorf("%v: an AfterGatePublisher %v, publishes after the gate %v; want %v", c.argv, ok, ok && p.PublishesAfterGate(), c.want)
		}
	}
}
