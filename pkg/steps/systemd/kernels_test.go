package systemd

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/kcache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// TestKernelCacheEnvInTheGeneration: without a generation the unit names no kernel cache;
// with one, each cache variable points into GEN/kernel-cache, and a variable the recipe
// sets itself is kept.
func TestKernelCacheEnvInTheGeneration(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	s := newStep(t, qwenSpec())
	if v, ok := unitEnv(t, s, env)["TRITON_CACHE_DIR"]; ok {
		t.Errorf("without a generation: TRITON_CACHE_DIR=%s", v)
	}
	env.Generation = &engine.GenerationInfo{Key: "abc", Dir: "/opt/sglprov/generations/r/abc"}
	got := unitEnv(t, s, env)
	want := map[string]string{
		"TRITON_CACHE_DIR":          "/opt/sglprov/generations/r/abc/kernel-cache/triton",
		"FLASHINFER_WORKSPACE_BASE": "/opt/sglprov/generations/r/abc/kernel-cache/flashinfer",
		"TORCHINDUCTOR_CACHE_DIR":   "/opt/sglprov/generations/r/abc/kernel-cache/inductor",
		"DG_JIT_CACHE_DIR":          "/opt/sglprov/generations/r/abc/kernel-cache/deepgemm",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	spec := qwenSpec()
	spec.Env = map[string]string{"TRITON_CACHE_DIR": "/var/cache/triton"}
	if v := unitEnv(t, newStep(t, spec), env)["TRITON_CACHE_DIR"]; v != "/var/cache/triton" {
		t.Errorf("the recipe's own TRITON_CACHE_DIR: %q", v)
	}
}

// TestKernelCacheDirsForTheServiceUser (root): a server run as a user (nobody) finds the
// generation's kernel cache folders its unit names made and its own, 0750, the kernels
// pulled from a real registry (kcache.Restore) handed over with them; a folder the recipe
// points elsewhere is not made; a server run as root gets root's folders.
func TestKernelCacheDirsForTheServiceUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: handing folders to another user needs root")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("skipping: no user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	ownerOf := func(p string) (int, os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return int(fi.Sys().(*syscall.Stat_t).Uid), fi.Mode()
	}

	// Node A's kernels, pushed; node B pulls them into its generation.
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/k", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, "rtx-pro-6000-x8.json")
	key := kcache.KeyOf("gen1", env.Facts)
	a := t.TempDir()
	os.MkdirAll(filepath.Join(a, "triton", "0123abcd"), 0o755)
	os.WriteFile(filepath.Join(a, "triton", "0123abcd", "kernel.cubin"), []byte("cubin"), 0o644)
	if _, err := kcache.Publish(ctx, c, key, a, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	env.Generation = &engine.GenerationInfo{Key: "gen1", Dir: filepath.Join(t.TempDir(), "gen1")}
	dir := kcache.Dir(env.Generation.Dir)
	if got, _, err := kcache.Restore(ctx, c, key, dir, nil); err != nil || got == nil {
		t.Fatalf("pulling the kernels: %v %v", got, err)
	}

	spec := qwenSpec()
	spec.User = "nobody"
	spec.Env = map[string]string{"DG_JIT_CACHE_DIR": "/var/cache/deepgemm"}
	s := newStep(t, spec)
	p, err := s.pick(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.kernelCacheDirs(env, p); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"flashinfer", "inductor", "triton"} {
		if got, mode := ownerOf(filepath.Join(dir, sub)); got != uid || !mode.IsDir() || sub != "triton" && mode.Perm() != 0o750 {
			t.Errorf("%s: uid %d, mode %v; want nobody's (%d), 0750", sub, got, mode, uid)
		}
	}
	for _, p := range []string{"triton/0123abcd", "triton/0123abcd/kernel.cubin"} {
		if got, _ := ownerOf(filepath.Join(dir, p)); got != uid {
			t.Errorf("pulled %s: uid %d, want nobody's (%d)", p, got, uid)
		}
	}
	if got, _ := ownerOf(dir); got != 0 {
		t.Errorf("%s: uid %d, want root's", dir, got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "deepgemm")); err == nil {
		t.Error("the folder of a cache the recipe points elsewhere was made")
	}

	// Run as root: root's folders.
	env.Generation = &engine.GenerationInfo{Key: "gen2", Dir: filepath.Join(t.TempDir(), "gen2")}
	if err := newStep(t, qwenSpec()).kernelCacheDirs(env, p); err != nil {
		t.Fatal(err)
	}
	if got, mode := ownerOf(filepath.Join(kcache.Dir(env.Generation.Dir), "triton")); got != 0 || !mode.IsDir() {
		t.Errorf("a root server's triton folder: uid %d, mode %v", got, mode)
	}
}
