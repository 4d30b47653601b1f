package smoke

import (
	"context"
	"path/filepath"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/kcache"
)

// Publish pushes, once the gate passed on a pushing node, the kernel caches the server
// compiled in the generation (kcache: FlashInfer's, Triton's, TorchInductor's and
// DeepGEMM's folders), keyed by the generation, GPU arch list, driver and CUDA version.
// Nothing without a generation, or when the caches are empty or the cache holds them.
func (s *Step) Publish(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	if env.Generation == nil || env.Generation.Dir == "" || env.Offline {
		return "", nil
	}
	k := kcache.KeyOf(env.Generation.Key, env.Facts)
	a, err := kcache.Publish(ctx, slot.Cache, k, env.Path(kcache.Dir(env.Generation.Dir)), filepath.Join(env.StateDir, "kernels"))
	if err != nil || a == nil {
		return "", err
	}
	env.Log.Info("pushed the kernel caches", "artifact", a.Digest, "key", k.String())
	return a.Digest, nil
}
