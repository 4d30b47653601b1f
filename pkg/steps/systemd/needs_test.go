package systemd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/service"
)

// writeTool writes an executable shell script at dir/name.
func writeTool(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestUnitPath(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		env     map[string]string
		want    string
	}{
		{"venv and toolkit", []string{"/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server"},
			map[string]string{"CUDA_HOME": "/usr/local/cuda-13.0"},
			"/opt/sglang/.venv/bin:/usr/local/cuda-13.0/bin:" + BasePath},
		{"venv only", []string{"/opt/sglang/.venv/bin/python"}, nil, "/opt/sglang/.venv/bin:" + BasePath},
		{"interpreter in a base folder is not repeated", []string{"/usr/bin/python3"}, nil, BasePath},
		{"relative interpreter and toolkit are left out", []string{"python3"}, map[string]string{"CUDA_HOME": "cuda"}, BasePath},
		{"the recipe's own PATH is kept", []string{"/opt/sglang/.venv/bin/python"},
			map[string]string{"PATH": "/usr/bin:/bin", "CUDA_HOME": "/usr/local/cuda"}, "/usr/bin:/bin"},
	}
	for _, tc := range tests {
		if got := unitPath(tc.command, tc.env); got != tc.want {
			t.Errorf("%s: unitPath = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// toolkitSpec is the SM120 service with the default needs, a fake venv's interpreter and a
// fake toolkit as CUDA_HOME, both under dir.
func toolkitSpec(dir string) Spec {
	spec := qwenSpec()
	spec.NeedsCommands = nil
	spec.Command = []string{filepath.Join(dir, "venv/bin/python"), "-m", "sglang.launch_server"}
	spec.Env = map[string]string{"CUDA_HOME": filepath.Join(dir, "cuda")}
	return spec
}

// TestNeedsRefuseBeforeInstall: without ninja in the venv the step refuses with exit 4,
// naming the unit, the program and the fix, and installs and starts nothing; once the venv
// has ninja and the toolkit nvcc the rendered unit's PATH finds both and the server starts.
func TestNeedsRefuseBeforeInstall(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	ctx := context.Background()
	dir := t.TempDir()
	writeTool(t, filepath.Join(dir, "venv/bin"), "python")
	writeTool(t, filepath.Join(dir, "cuda/bin"), "nvcc")
	s := newStep(t, toolkitSpec(dir))
	fm := withFake(t, env)

	err := s.Run(ctx, env)
	if err == nil {
		t.Fatal("Run without ninja on the unit's PATH succeeded")
	}
	if !errors.Is(err, exitcode.ErrHost) || exitcode.Of(err) != exitcode.ExitHost {
		t.Errorf("error %v: exit %d, want %d", err, exitcode.Of(err), exitcode.ExitHost)
	}
	for _, want := range []string{"unit sglang-qwen.service", "runs ninja,", "pip install ninja", filepath.Join(dir, "venv/bin")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "nvcc,") || strings.Contains(err.Error(), "and nvcc") {
		t.Errorf("nvcc, which the toolkit has, is named missing: %v", err)
	}
	if ops := fm.take(); len(ops) != 0 {
		t.Errorf("the refused step still did %v", ops)
	}
	if _, err := os.Stat(fm.UnitPath("sglang-qwen.service")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unit written despite the refusal: %v", err)
	}

	writeTool(t, filepath.Join(dir, "venv/bin"), "ninja")
	if err := s.Run(ctx, env); err != nil {
		t.Fatalf("Run with ninja and nvcc in place: %v", err)
	}
	unit, err := os.ReadFile(fm.UnitPath("sglang-qwen.service"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.ReadService("sglang-qwen.service", unit, "/var/cache")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ninja", "nvcc"} {
		if _, ok := lookPath("", svc.Env["PATH"], name); !ok {
			t.Errorf("%s does not resolve under the installed unit's PATH %q", name, svc.Env["PATH"])
		}
	}
}

// TestNeedsUnderTheUnitsOwnPath: a recipe PATH without the venv is what is checked (and
// refused), not the PATH sglprov derives or its own; under --root the folders are looked up
// in the root.
func TestNeedsUnderTheUnitsOwnPath(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeTool(t, filepath.Join(dir, "venv/bin"), "ninja")
	writeTool(t, filepath.Join(dir, "cuda/bin"), "nvcc")

	env := testEnv(t, "rtx-pro-6000-x8.json")
	spec := toolkitSpec(dir)
	spec.Env["PATH"] = filepath.Join(dir, "cuda/bin") + ":/usr/bin:/bin"
	s := newStep(t, spec)
	fm := withFake(t, env)
	err := s.Run(ctx, env)
	if err == nil || !strings.Contains(err.Error(), "runs ninja,") || exitcode.Of(err) != exitcode.ExitHost {
		t.Fatalf("Run with a PATH that lacks the venv = %v, want the ninja refusal (exit 4)", err)
	}
	if ops := fm.take(); len(ops) != 0 {
		t.Errorf("the refused step still did %v", ops)
	}

	// Offline under --root the unit is rendered for another node, whose own PATH decides:
	// nothing is checked against this host or the root, as plan lists them unchecked.
	root := t.TempDir()
	env = testEnv(t, "rtx-pro-6000-x8.json")
	env.Root, env.Offline = root, true
	spec = qwenSpec()
	spec.NeedsCommands = nil
	spec.Manager = "systemd"
	spec.Env = map[string]string{"CUDA_HOME": "/usr/local/cuda-13.0"}
	s = newStep(t, spec)
	if err := s.Run(ctx, env); err != nil {
		t.Fatalf("offline Run with neither ninja nor nvcc under the root = %v, want the unit rendered unchecked", err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/systemd/system", spec.Unit)); err != nil {
		t.Errorf("offline Run wrote no unit under the root: %v", err)
	}

	// A listed program with a slash is checked as it is; an empty list checks nothing.
	spec = toolkitSpec(dir)
	spec.NeedsCommands = &[]string{"/nonexistent/bin/tool"}
	if err := newStep(t, spec).checkNeeds(testEnv(t, ""), "systemd", []byte("[Service]\nExecStart=/bin/true\n")); err == nil ||
		!strings.Contains(err.Error(), "/nonexistent/bin/tool") || !strings.Contains(err.Error(), "systemd's default PATH") {
		t.Errorf("absolute missing program under a unit without PATH: %v", err)
	}
}

func TestNeedsCommandsValidated(t *testing.T) {
	for _, bad := range []string{"", "nin ja", "bin/ninja"} {
		spec := qwenSpec()
		spec.NeedsCommands = &[]string{bad}
		if _, err := New("x", spec); err == nil || exitcode.Of(err) != exitcode.ExitUsage {
			t.Errorf("needs_commands [%q]: %v, want a usage error", bad, err)
		}
	}
}
