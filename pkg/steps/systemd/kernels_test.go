package systemd

import (
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
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
