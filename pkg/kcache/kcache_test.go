package kcache_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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
