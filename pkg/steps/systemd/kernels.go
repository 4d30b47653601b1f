package systemd

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strconv"

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

// kernelCacheDirs makes the generation's kernel cache folders that the unit's environment
// names with profile (kcache.Env: the variables the recipe does not point elsewhere),
// before the server starts: with a service user (the step's user, not root) each is 0750
// and the user's, a cache just pulled included, so that the server can write the
// kernels it compiles. Nothing without a generation, and nothing offline (the image's
// users are not this host's).
func (s *Step) kernelCacheDirs(env *engine.Env, profile string) error {
	if env.Generation == nil || env.Generation.Dir == "" || env.Offline {
		return nil
	}
	// The recipe's own environment decides which variables point into the generation
	// (kernelCacheEnv); the unit's other variables come from the host's probes, which
	// the unit's rendering runs.
	own := s.ownEnv(env, profile)
	dir := kcache.Dir(env.Generation.Dir)
	var subs []string
	for k, v := range kcache.Env(dir) {
		if o, set := own[k]; !set || o == v {
			subs = append(subs, kcache.Vars[k])
		}
	}
	sort.Strings(subs)
	uid, gid := -1, -1
	if s.spec.User != "" && s.spec.User != "root" && os.Geteuid() == 0 {
		u, err := user.Lookup(s.spec.User)
		if err != nil {
			return fmt.Errorf("looking up the service user %q for the kernel caches: %w", s.spec.User, err)
		}
		if uid, err = strconv.Atoi(u.Uid); err != nil {
			return fmt.Errorf("looking up the service user %q: uid %q: %w", s.spec.User, u.Uid, err)
		}
		if gid, err = strconv.Atoi(u.Gid); err != nil {
			return fmt.Errorf("looking up the service user %q: gid %q: %w", s.spec.User, u.Gid, err)
		}
	}
	return kcache.Prepare(env.Path(dir), subs, uid, gid)
}
