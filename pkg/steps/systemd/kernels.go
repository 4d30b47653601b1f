package systemd

import (
	"context"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/kcache"
	"github.com/sglprov/sglprov/pkg/treepack"
)

// kernelCacheEnv points each compiled-kernel cache of the server into the generation
// (kcache.Env), for the variables the recipe does not set itself; none without a
// generation.
func kernelCacheEnv(env *engine.Env, into map[string]string) {
	if env.Generation == nil || env.Generation.Dir == "" {
		return
	}
	for k, v := range kcache.Env(kcache.Dir(env.Generation.Dir)) {
		if _, set := into[k]; !set {
			into[k] = v
		}
	}
}

// RunCached is Run with the fleet cache: before the server starts, the generation's kernel
// caches that a node whose gate passed pushed for this GPU arch, driver and CUDA version
// are pulled into the generation (when it holds none yet). A pull that fails is said in
// the log and the report; the server then compiles its kernels itself.
func (s *Step) RunCached(ctx context.Context, env *engine.Env, slot engine.CacheSlot) error {
	if slot.Cache != nil && env.Generation != nil && env.Generation.Dir != "" && !env.Offline {
		k := kcache.KeyOf(env.Generation.Key, env.Facts)
		dir := env.Path(kcache.Dir(env.Generation.Dir))
		a, m, err := kcache.Restore(ctx, slot.Cache, k, dir, func(p treepack.Progress) {
			env.Log.Info("pulling the kernel caches", "progress", p.String())
		})
		switch {
		case err != nil:
			env.Log.Warn("cannot take the kernel caches from the cache; the server compiles its own", "cache", slot.Cache.String(), "err", err)
			env.Detail("kernels_error", err.Error())
		case a != nil:
			env.Log.Info("kernel caches taken from the cache", "artifact", a.Digest, "caches", kcache.Describe(m.Caches), "key", k.String())
			env.Detail("kernels", a.Digest)
		}
	}
	return s.Run(ctx, env)
}
