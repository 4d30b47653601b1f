// Package kcache carries the server's compiled-kernel caches (FlashInfer's JIT workspace,
// Triton's cache, TorchInductor's and DeepGEMM's) through the fleet cache: one artifact per
// generation, GPU arch list, driver version and CUDA version, since those decide whether a
// kernel compiled on one node loads on another. The caches live in the generation's folder
// (Dir), the server's environment points each one there (Env), so that a switch never
// reads another generation's kernels; a node whose gate passed pushes the folder
// (Publish), and another node pulls it before its server's first start (Restore).
package kcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/treepack"
)

// Kind is the artifact type of a kernel cache: its config is Meta, its layers the folder
// (treepack).
const Kind = "application/vnd.sglprov.kernels.v1"

// DirName is the kernel caches' folder in a generation.
const DirName = "kernel-cache"

// Vars maps each variable the server's libraries read to its sub-folder of the kernel
// cache folder: Triton's TRITON_CACHE_DIR (its compiled kernels), FlashInfer's
// FLASHINFER_WORKSPACE_BASE (flashinfer/jit/env.py: the JIT cache is
// BASE/.cache/flashinfer/ARCHS/cached_ops), TorchInductor's TORCHINDUCTOR_CACHE_DIR and
// DeepGEMM's DG_JIT_CACHE_DIR.
var Vars = map[string]string{
	"TRITON_CACHE_DIR":          "triton",
	"FLASHINFER_WORKSPACE_BASE": "flashinfer",
	"TORCHINDUCTOR_CACHE_DIR":   "inductor",
	"DG_JIT_CACHE_DIR":          "deepgemm",
}

// Dir is the kernel caches' folder of the generation in genDir.
func Dir(genDir string) string { return filepath.Join(genDir, DirName) }

// Env is the server's environment that points each cache into dir (Dir of a generation).
func Env(dir string) map[string]string {
	out := make(map[string]string, len(Vars))
	for k, sub := range Vars {
		out[k] = filepath.Join(dir, sub)
	}
	return out
}

// Key is what a compiled kernel depends on beyond its source.
type Key struct {
	// Generation is the generation's key (its pins, patches, toolchain).
	Generation string `json:"generation"`
	// Arch is the GPUs' arch list (e.g. "12.0"), Driver the driver's version, CUDA the
	// CUDA version the driver supports.
	Arch   string `json:"arch"`
	Driver string `json:"driver"`
	CUDA   string `json:"cuda"`
}

// KeyOf is the key of the kernels compiled in generation gen on a host with facts f (nil:
// no GPU facts, the key then names none).
func KeyOf(gen string, f *gpu.Facts) Key {
	k := Key{Generation: gen}
	if f != nil {
		k.Arch, k.Driver, k.CUDA = f.ArchList(), f.DriverVersion, f.CUDAVersion()
	}
	return k
}

// Tag is the artifact's tag for k.
func (k Key) Tag() string {
	s := sha256.Sum256([]byte(strings.Join([]string{k.Generation, k.Arch, k.Driver, k.CUDA}, "\x00")))
	return "kernels-" + hex.EncodeToString(s[:])
}

// String names k for logs.
func (k Key) String() string {
	return fmt.Sprintf("generation %s, arch %s, driver %s, CUDA %s", k.Generation, k.Arch, k.Driver, k.CUDA)
}

// Meta is a kernel cache artifact's config.
type Meta struct {
	Key Key `json:"key"`
	// Caches counts the files under each sub-folder (Vars' values) that held any.
	Caches map[string]int `json:"caches"`
	Files  int            `json:"files"`
	Links  int            `json:"links"`
	Dirs   int            `json:"dirs"`
	Bytes  int64          `json:"bytes"`
}

// Count returns the files under each sub-folder of dir that holds any.
func Count(dir string) map[string]int {
	out := map[string]int{}
	for _, sub := range Vars {
		n := 0
		filepath.WalkDir(filepath.Join(dir, sub), func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				n++
			}
			return nil
		})
		if n > 0 {
			out[sub] = n
		}
	}
	return out
}

// skipLocks leaves out the lock files the libraries hold while compiling (FlashInfer's
// and Triton's *.lock, Triton's tmp.* folders of a compile in flight).
func skipLocks(name string) bool {
	base := filepath.Base(name)
	return strings.HasSuffix(base, ".lock") || strings.HasPrefix(base, "tmp.")
}

// Publish pushes dir (the kernel caches of a generation) tagged k.Tag(), its layers
// written into a folder of work and removed after; a dir with no file pushes nothing (nil).
// A tag the cache holds already is not pushed again.
func Publish(ctx context.Context, c cache.Cache, k Key, dir, work string) (*cache.Artifact, error) {
	caches := Count(dir)
	if len(caches) == 0 {
		return nil, nil
	}
	if a, err := c.Lookup(ctx, k.Tag()); err != nil || a != nil {
		return nil, err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, fmt.Errorf("publishing the kernel caches: %w", err)
	}
	tmp, err := os.MkdirTemp(work, "kernels-")
	if err != nil {
		return nil, fmt.Errorf("publishing the kernel caches: %w", err)
	}
	defer os.RemoveAll(tmp) // made here, holding only the layers written into it
	layers, st, err := treepack.Pack(ctx, dir, tmp, treepack.PackOptions{Skip: skipLocks})
	if err != nil {
		return nil, fmt.Errorf("publishing the kernel caches: %w", err)
	}
	meta, err := json.MarshalIndent(Meta{Key: k, Caches: caches, Files: st.Files, Links: st.Links, Dirs: st.Dirs, Bytes: st.Bytes}, "", "  ")
	if err != nil {
		return nil, err
	}
	a, err := c.Push(ctx, k.Tag(), Kind, meta, layers)
	if err != nil {
		return nil, fmt.Errorf("publishing the kernel caches: %w", err)
	}
	return a, nil
}

// Restore pulls the kernel caches tagged k.Tag() into dir, when dir holds no cache yet
// (a node's first start in this generation: a cache it compiled itself is kept). It
// returns nils when there is nothing to do or the cache has no such artifact.
func Restore(ctx context.Context, c cache.Cache, k Key, dir string, progress func(treepack.Progress)) (*cache.Artifact, *Meta, error) {
	if len(Count(dir)) > 0 {
		return nil, nil, nil
	}
	a, err := c.Lookup(ctx, k.Tag())
	if err != nil || a == nil {
		return nil, nil, err
	}
	if a.Kind != Kind {
		return nil, nil, fmt.Errorf("the artifact %s is a %s, not kernel caches", a.Digest, a.Kind)
	}
	var m Meta
	if len(a.Meta) > 1<<20 || json.Unmarshal(a.Meta, &m) != nil {
		return nil, nil, fmt.Errorf("reading the artifact %s: not a kernel cache's record", a.Digest)
	}
	if m.Key != k {
		return nil, nil, fmt.Errorf("the artifact %s holds the kernels of %s, this node needs %s", a.Digest, m.Key, k)
	}
	_, err = treepack.Unpack(ctx, treepack.Registry{Cache: c}, a.Files, dir, treepack.UnpackOptions{
		MaxBytes: m.Bytes, MaxFiles: m.Files + m.Links + m.Dirs, Progress: progress, StallTimeout: 60 * time.Second,
	})
	if err != nil {
		return a, &m, fmt.Errorf("unpacking the kernel caches %s: %w", a.Digest, err)
	}
	return a, &m, nil
}

// Describe lists counts as "triton 12 files, flashinfer 3 files" for logs.
func Describe(counts map[string]int) string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d files", n, counts[n])
	}
	return strings.Join(parts, ", ")
}

// Prepare makes the folder of each cache in subs (values of Vars) under dir (Dir of a
// generation), for a server that runs as uid:gid. With uid > 0 (a service user) a folder
// made here is 0750 and the user's, and a folder that is not the user's yet (made by an
// earlier run as root, or just unpacked from a pulled cache) is handed over with all it
// holds, deepest entries first, so that no folder is the user's while entries under it
// are still being handed over; a folder that is the user's already is left as it is (what
// the server wrote there). With uid < 0 or 0 (the server runs as root) the folders are
// made 0755 and nothing changes hands. dir itself stays root's (0755).
func Prepare(dir string, subs []string, uid, gid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making the kernel cache folder: %w", err)
	}
	user := uid > 0
	for _, sub := range subs {
		p := filepath.Join(dir, sub)
		mode := os.FileMode(0o755)
		if user {
			mode = 0o750
		}
		err := os.Mkdir(p, mode)
		switch {
		case err == nil:
			if err := os.Chmod(p, mode); err != nil { // past the umask
				return fmt.Errorf("making the kernel cache folder %s: %w", p, err)
			}
		case !errors.Is(err, fs.ErrExist):
			return fmt.Errorf("making the kernel cache folder %s: %w", p, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("making the kernel cache folder %s: %w", p, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("the kernel cache folder %s is not a folder", p)
		}
		if !user {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
			continue
		}
		if err := handOver(p, uid, gid); err != nil {
			return fmt.Errorf("handing the kernel cache folder %s to uid %d: %w", p, uid, err)
		}
	}
	return nil
}

// handOver changes the owner of the tree at root (never following a link), its deepest
// entries first and root last.
func handOver(root string, uid, gid int) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(paths) - 1; i >= 0; i-- {
		if err := os.Lchown(paths[i], uid, gid); err != nil {
			return err
		}
	}
	return nil
}
