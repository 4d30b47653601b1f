package fakesglang

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// kernelCacheVars are the variables that point the real server's libraries at their
// compiled-kernel caches, with where in each folder the fake puts what it "compiles":
// Triton (a folder per kernel hash), FlashInfer's JIT workspace (flashinfer/jit/env.py:
// BASE/.cache/flashinfer/ARCHS/cached_ops), TorchInductor, DeepGEMM.
var kernelCacheVars = []struct{ name, sub string }{
	{"TRITON_CACHE_DIR", "fakehash0/kernel.cubin"},
	{"FLASHINFER_WORKSPACE_BASE", ".cache/flashinfer/fake/cached_ops/fake/fake.so"},
	{"TORCHINDUCTOR_CACHE_DIR", "fake/kernel.py"},
	{"DG_JIT_CACHE_DIR", "cache/fake/kernel.cubin"},
}

// reportKernelCaches writes, at start, one line per kernel cache variable that is set: the
// folder it names and the files in it. With --fake-compile-kernels, a folder that holds
// no file gets one, as a real server's first start compiles its kernels into the cache,
// and the line says "compiled"; else "loaded" (what was there is what it would load).
func reportKernelCaches(w io.Writer, getenv func(string) string, args []string) {
	if getenv == nil {
		return
	}
	compile := slices.Contains(args, "--fake-compile-kernels")
	for _, v := range kernelCacheVars {
		dir := getenv(v.name)
		if dir == "" {
			continue
		}
		n := countFiles(dir)
		verb := "loaded"
		if n == 0 && compile {
			p := filepath.Join(dir, v.sub)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil && os.WriteFile(p, []byte("fake kernel\n"), 0o644) == nil {
				verb, n = "compiled", 1
			}
		}
		fmt.Fprintf(w, "fake-sglang: kernel cache %s=%s (%d files, %s)\n", v.name, dir, n, verb)
	}
}

// countFiles counts the regular files under dir (at most a million).
func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		if n > 1_000_000 {
			return filepath.SkipAll
		}
		return nil
	})
	return n
}
