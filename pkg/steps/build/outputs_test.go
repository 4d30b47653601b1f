package build

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// builtWheel runs a fake build that writes dist/sgl_kernel.whl and returns the step, its
// env and the wheel's path.
func builtWheel(t *testing.T) (*Step, *engine.Env, string) {
	t.Helper()
	fakeTools(t)
	src := t.TempDir()
	writeScript(t, filepath.Join(src, "build.sh"), "mkdir -p dist && printf 'wheel-v1' > dist/sgl_kernel-0.3.whl\n")
	env, _, _ := testEnv(t)
	s := newStep(t, Spec{Dir: src, Argv: []string{"./build.sh"}, Outputs: []string{"dist/*.whl"}})
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return s, env, filepath.Join(src, "dist", "sgl_kernel-0.3.whl")
}

func TestIntact(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, whl string, env *engine.Env)
		ok     bool
		reason string
	}{
		{"unchanged", func(*testing.T, string, *engine.Env) {}, true, ""},
		{"touched, same content", func(t *testing.T, whl string, _ *engine.Env) {
			later := time.Now().Add(time.Hour)
			os.Chtimes(whl, later, later)
		}, true, ""},
		{"content changed", func(t *testing.T, whl string, _ *engine.Env) {
			writeFile(t, whl, "wheel-v2-longer")
		}, false, "outputs changed: WHL"},
		{"same size and mtime, content changed, no --verify", func(t *testing.T, whl string, _ *engine.Env) {
			fi, _ := os.Stat(whl)
			writeFile(t, whl, "wheel-v2")
			os.Chtimes(whl, fi.ModTime(), fi.ModTime())
		}, true, ""},
		{"same size and mtime, content changed, --verify", func(t *testing.T, whl string, env *engine.Env) {
			fi, _ := os.Stat(whl)
			writeFile(t, whl, "wheel-v2")
			os.Chtimes(whl, fi.ModTime(), fi.ModTime())
			env.Verify = true
		}, false, "outputs changed: WHL"},
		{"removed", func(t *testing.T, whl string, _ *engine.Env) { os.Remove(whl) }, false, "outputs missing: dist/*.whl"},
		{"renamed", func(t *testing.T, whl string, _ *engine.Env) {
			os.Rename(whl, filepath.Join(filepath.Dir(whl), "other.whl"))
		}, false, "outputs missing: WHL"},
		{"another file matches", func(t *testing.T, whl string, _ *engine.Env) {
			writeFile(t, filepath.Join(filepath.Dir(whl), "stale-0.2.whl"), "old")
		}, false, "outputs changed: DIST/stale-0.2.whl (not made by the last build)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, env, whl := builtWheel(t)
			tc.change(t, whl, env)
			ok, reason, err := s.Intact(context.Background(), env)
			if err != nil {
				t.Fatalf("Intact: %v", err)
			}
			want := strings.NewReplacer("WHL", whl, "DIST", filepath.Dir(whl)).Replace(tc.reason)
			if ok != tc.ok || reason != want {
				t.Errorf("Intact = %t, %q; want %t, %q", ok, reason, tc.ok, want)
			}
		})
	}
}

func TestIntactWithoutRecord(t *testing.T) {
	fakeTools(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "dist", "x.whl"), "w")
	env, _, _ := testEnv(t)
	s := newStep(t, Spec{Dir: src, Argv: []string{"true"}, Outputs: []string{"dist/*.whl"}})
	if ok, reason, err := s.Intact(context.Background(), env); ok || err != nil || !strings.Contains(reason, "no record") {
		t.Errorf("Intact = %t, %q, %v; want false for lack of a record", ok, reason, err)
	}
	s = newStep(t, Spec{Dir: src, Argv: []string{"true"}})
	if ok, _, err := s.Intact(context.Background(), env); !ok || err != nil {
		t.Errorf("Intact without outputs = %t, %v; want true", ok, err)
	}
}

func TestRelativeDirAndAbsoluteOutputUnderRoot(t *testing.T) {
	fakeTools(t)
	env, _, _ := testEnv(t)
	env.RecipeDir = t.TempDir()
	env.Root = t.TempDir()
	writeScript(t, filepath.Join(env.RecipeDir, "hello", "build.sh"),
		"mkdir -p \"$OUTDIR\" && echo hi > \"$OUTDIR/hello.txt\"\n")
	s := newStep(t, Spec{Dir: "hello", Argv: []string{"./build.sh"},
		Env:     map[string]string{"OUTDIR": filepath.Join(env.Root, "opt", "out")},
		Outputs: []string{"/opt/out/*.txt"}})
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ok, reason, err := s.Intact(context.Background(), env); !ok || err != nil {
		t.Errorf("Intact = %t, %q, %v", ok, reason, err)
	}
}

func TestRelativeDirFromRelativeRecipeDir(t *testing.T) {
	fakeTools(t)
	env, _, _ := testEnv(t)
	base := t.TempDir()
	t.Chdir(base)
	env.RecipeDir = "."
	writeScript(t, filepath.Join(base, "proj", "build.sh"), "mkdir -p out && echo ok > out/ok.txt\n")
	s := newStep(t, Spec{Dir: "proj", Argv: []string{"./build.sh"}, Outputs: []string{"out/ok.txt"}})
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "proj", "out", "ok.txt")); err != nil {
		t.Error(err)
	}
}
