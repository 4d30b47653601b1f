package kcache_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/kcache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// TestKernelCachesThroughRegistry: node A's caches (Triton's folders, FlashInfer's
// workspace, a lock file of a compile in flight) pushed under the key of its generation,
// arch, driver and CUDA; node B with the same key pulls them (the lock file left out);
// another driver's key finds none; a folder that holds kernels already is not pulled over.
func TestKernelCachesThroughRegistry(t *testing.T) {
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	facts := &gpu.Facts{DriverVersion: "580.95.05", CUDADriverVersion: 13000, GPUs: []gpu.Device{{ComputeCapability: "12.0"}}}
	key := kcache.KeyOf("gen1", facts)
	if key.Arch == "" || key.CUDA != "13.0" || key.Driver != "580.95.05" {
		t.Fatalf("key %+v", key)
	}
	a := t.TempDir()
	files := map[string]string{
		"triton/0123abcd/kernel.cubin":                                "cubin",
		"triton/0123abcd/kernel.json":                                 "{}",
		"flashinfer/.cache/flashinfer/120a/cached_ops/batch/batch.so": "so",
		"flashinfer/.cache/flashinfer/120a/cached_ops/batch/.lock":    "",
	}
	for p, body := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(a, p)), 0o755)
		os.WriteFile(filepath.Join(a, p), []byte(body), 0o644)
	}
	c, _ := cache.New(cache.Config{Repository: reg.Addr + "/fleet/k", Push: true}, cache.Options{})
	art, err := kcache.Publish(ctx, c, key, a, t.TempDir())
	if err != nil || art == nil {
		t.Fatalf("publish: %v %v", art, err)
	}
	var m kcache.Meta
	json.Unmarshal(art.Meta, &m)
	if m.Caches["triton"] != 2 || m.Caches["flashinfer"] != 2 || m.Key != key {
		t.Errorf("meta %+v", m)
	}
	if again, err := kcache.Publish(ctx, c, key, a, t.TempDir()); err != nil || again != nil {
		t.Errorf("a second push: %v %v", again, err)
	}

	b := filepath.Join(t.TempDir(), "kernel-cache")
	got, _, err := kcache.Restore(ctx, c, key, b, nil)
	if err != nil || got == nil || got.Digest != art.Digest {
		t.Fatalf("restore: %v %v", got, err)
	}
	for p, body := range files {
		data, err := os.ReadFile(filepath.Join(b, p))
		if strings.HasSuffix(p, ".lock") {
			if err == nil {
				t.Errorf("the lock file %s travelled", p)
			}
			continue
		}
		if err != nil || string(data) != body {
			t.Errorf("%s: %q %v", p, data, err)
		}
	}
	other := key
	other.Driver = "570.0"
	if got, _, err := kcache.Restore(ctx, c, other, filepath.Join(t.TempDir(), "k"), nil); err != nil || got != nil {
		t.Errorf("another driver's key: %v %v", got, err)
	}
	// A folder with kernels of its own is kept.
	mine := filepath.Join(b, "triton", "0123abcd", "kernel.cubin")
	os.WriteFile(mine, []byte("compiled here"), 0o644)
	if got, _, err := kcache.Restore(ctx, c, key, b, nil); err != nil || got != nil {
		t.Errorf("restore over kernels: %v %v", got, err)
	}
	if data, _ := os.ReadFile(mine); string(data) != "compiled here" {
		t.Errorf("the node's own kernel was replaced: %q", data)
	}
	env := kcache.Env(kcache.Dir("/gen/abc"))
	if env["TRITON_CACHE_DIR"] != "/gen/abc/kernel-cache/triton" || env["FLASHINFER_WORKSPACE_BASE"] != "/gen/abc/kernel-cache/flashinfer" || len(env) != 4 {
		t.Errorf("env %v", env)
	}
}

// owner returns the uid that owns p (not following a link).
func owner(t *testing.T, p string) (int, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid), fi.Mode()
}

// TestPrepareHandsTheFoldersToTheServiceUser (root): for a service user, each cache
// folder is made 0750 and the user's; a cache just pulled (root's files, folders and a
// link) is handed over whole; the kernel-cache folder stays root's; a folder that is the
// user's already is not walked again (a root file put there stays root's); for a server
// run as root nothing changes hands.
func TestPrepareHandsTheFoldersToTheServiceUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: handing folders to another uid needs root")
	}
	const uid, gid = 4242, 4343
	dir := filepath.Join(t.TempDir(), "kernel-cache")
	// What a pulled cache leaves: root's tree under triton/.
	pulled := filepath.Join(dir, "triton", "0123abcd")
	os.MkdirAll(pulled, 0o755)
	os.WriteFile(filepath.Join(pulled, "kernel.cubin"), []byte("cubin"), 0o644)
	os.Symlink("kernel.cubin", filepath.Join(pulled, "latest"))
	if err := kcache.Prepare(dir, []string{"deepgemm", "flashinfer", "inductor", "triton"}, uid, gid); err != nil {
		t.Fatal(err)
	}
	if u, mode := owner(t, dir); u != 0 || mode.Perm() != 0o755 {
		t.Errorf("%s: uid %d, mode %v; want root's, 0755", dir, u, mode)
	}
	for _, sub := range []string{"deepgemm", "flashinfer", "inductor"} {
		if u, mode := owner(t, filepath.Join(dir, sub)); u != uid || mode.Perm() != 0o750 || !mode.IsDir() {
			t.Errorf("%s: uid %d, mode %v; want %d, a folder of 0750", sub, u, mode, uid)
		}
	}
	for _, p := range []string{"triton", "triton/0123abcd", "triton/0123abcd/kernel.cubin", "triton/0123abcd/latest"} {
		if u, _ := owner(t, filepath.Join(dir, p)); u != uid {
			t.Errorf("%s: uid %d, want %d", p, u, uid)
		}
	}
	// The user's folder already: what is in it is the server's, not walked again.
	rootFile := filepath.Join(dir, "inductor", "root-owned")
	os.WriteFile(rootFile, nil, 0o644)
	if err := kcache.Prepare(dir, []string{"inductor"}, uid, gid); err != nil {
		t.Fatal(err)
	}
	if u, _ := owner(t, rootFile); u != 0 {
		t.Errorf("a file in the user's folder changed hands: uid %d", u)
	}
	// A server run as root: folders made, root's.
	rootDir := filepath.Join(t.TempDir(), "kernel-cache")
	if err := kcache.Prepare(rootDir, []string{"triton"}, -1, -1); err != nil {
		t.Fatal(err)
	}
	if u, mode := owner(t, filepath.Join(rootDir, "triton")); u != 0 || mode.Perm() != 0o755 {
		t.Errorf("root's server: uid %d, mode %v", u, mode)
	}
	// A cache folder that is a file is refused.
	os.WriteFile(filepath.Join(rootDir, "deepgemm"), nil, 0o644)
	if err := kcache.Prepare(rootDir, []string{"deepgemm"}, uid, gid); err == nil {
		t.Error("a file in place of a cache folder was taken")
	}
}
