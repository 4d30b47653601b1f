package engine_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// memCache is a cache.Cache in memory: what the engine does with the cache, without a
// registry (pkg/cache and the CLI script test the real one).
type memCache struct {
	mu        sync.Mutex
	push      bool
	artifacts map[string]*cache.Artifact
	pushes    int
	lookups   int
	lookupErr error
	pushErr   error
}

func (m *memCache) Lookup(ctx context.Context, tag string) (*cache.Artifact, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookups++
	if m.lookupErr != nil {
		return nil, m.lookupErr
	}
	return m.artifacts[tag], nil
}

func (m *memCache) Pull(ctx context.Context, a *cache.Artifact, dir string) error { return nil }

func (m *memCache) Push(ctx context.Context, tag, kind string, meta []byte, files []cache.File) (*cache.Artifact, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pushErr != nil {
		return nil, m.pushErr
	}
	m.pushes++
	a := &cache.Artifact{Digest: "sha256:" + strings.Repeat("d", 63) + string(rune('0'+m.pushes)), Tag: tag, Kind: kind}
	if m.artifacts == nil {
		m.artifacts = map[string]*cache.Artifact{}
	}
	m.artifacts[tag] = a
	return a, nil
}

func (m *memCache) HasBlob(ctx context.Context, sha string) (bool, error) { return false, nil }
func (m *memCache) BlobURL(sha string) string                             { return "" }
func (m *memCache) HTTPClient() *http.Client                              { return http.DefaultClient }
func (m *memCache) CanPush() bool                                         { return m.push }
func (m *memCache) GaveUp() error                                         { return nil }
func (m *memCache) MinRate() int64                                        { return 0 }
func (m *memCache) String() string                                        { return "mem" }

// cachedStep is a fake step that restores from and publishes to the cache.
type cachedStep struct {
	fakeStep
	published int
}

func (c *cachedStep) Restore(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, bool, error) {
	a, err := slot.Cache.Lookup(ctx, slot.Tag)
	if err != nil || a == nil {
		return "", false, err
	}
	return a.Digest, true, nil
}

func (c *cachedStep) Publish(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	c.published++
	a, err := slot.Cache.Push(ctx, slot.Tag, cache.KindBuild, []byte(`{}`), nil)
	if err != nil {
		return "", err
	}
	return a.Digest, nil
}

func cachedRegistry(w *world) engine.Registry {
	r := registry(w)
	r["cached"] = engine.Kind{
		NewSpec: func() any { return &fakeSpec{} },
		New: func(name string, spec any) (engine.Step, error) {
			return &cachedStep{fakeStep: fakeStep{name: name, spec: *spec.(*fakeSpec), w: w}}, nil
		},
	}
	return r
}

func loadCached(t *testing.T, w *world) *recipe.Recipe {
	t.Helper()
	specs := recipe.KindSpecs{}
	for k, v := range cachedRegistry(w) {
		specs[k] = v.NewSpec
	}
	r, err := recipe.Parse("test.yaml", []byte(cachedRecipe), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const cachedRecipe = `apiVersion: sglprov/v1
name: t
steps:
  - name: kernel
    cached: {input: "a"}
  - name: after
    needs: [kernel]
    fake: {}
`

func TestCacheRestoreAndPublish(t *testing.T) {
	ctx := context.Background()
	mc := &memCache{push: true}
	run := func(dir string, c *memCache, mod func(*engine.Options)) (*world, *engine.Report, error) {
		w := newWorld()
		o := engine.Options{Recipe: loadCached(t, w), Registry: cachedRegistry(w), StateDir: dir, Cache: c}
		if mod != nil {
			mod(&o)
		}
		e, err := engine.New(o)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := e.Apply(ctx)
		return w, rep, err
	}
	step := func(rep *engine.Report, name string) *engine.StepReport {
		for _, s := range rep.Steps {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no step %s in the report", name)
		return nil
	}

	// Node A: nothing in the cache; the step runs and is published once.
	dirA := t.TempDir()
	w, rep, err := run(dirA, mc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(w.ran, "kernel") || mc.pushes != 1 || step(rep, "kernel").Pushed == "" {
		t.Fatalf("node A: ran %v, %d pushes, pushed %q", w.ran, mc.pushes, step(rep, "kernel").Pushed)
	}
	// Forced again: the tag exists, nothing is pushed twice.
	if _, _, err := run(dirA, mc, func(o *engine.Options) { o.Force = []string{"kernel"} }); err != nil || mc.pushes != 1 {
		t.Fatalf("forced re-run: %v, %d pushes; want no second push", err, mc.pushes)
	}

	// Node B: a fresh state; plan says from cache, apply takes it and does not run it.
	pull := &memCache{artifacts: mc.artifacts}
	dirB := t.TempDir()
	w = newWorld()
	e, err := engine.New(engine.Options{Recipe: loadCached(t, w), Registry: cachedRegistry(w), StateDir: dirB, Cache: pull})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Steps[0].FromCache == "" || !strings.Contains(p.Steps[0].Reason, "new; from cache sha256:") {
		t.Errorf("plan: %+v", p.Steps[0])
	}
	w, rep, err = run(dirB, pull, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := step(rep, "kernel")
	if contains(w.ran, "kernel") || k.Result != engine.ResultOK || k.FromCache == "" || !contains(w.ran, "after") {
		t.Errorf("node B: ran %v, kernel %s from %q", w.ran, k.Result, k.FromCache)
	}
	if !strings.Contains(rep.Summary(), "ok (from cache)") {
		t.Errorf("summary:\n%s", rep.Summary())
	}
	st, err := engine.LoadState(dirB)
	if err != nil || st.Steps["kernel"].Artifact != k.FromCache {
		t.Errorf("state records artifact %q, want %q (%v)", st.Steps["kernel"].Artifact, k.FromCache, err)
	}

	// Node C: the cache fails; the step runs and says why.
	broken := &memCache{lookupErr: errors.New("registry down")}
	w, rep, err = run(t.TempDir(), broken, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k := step(rep, "kernel"); !contains(w.ran, "kernel") || !strings.Contains(k.Reason, "new; cache pull failed, ran instead: registry down") {
		t.Errorf("node C: ran %v, reason %q", w.ran, k.Reason)
	}

	// Node D pushes, and the push fails: a warning, not a failed step.
	failing := &memCache{push: true, pushErr: errors.New("quota exceeded")}
	_, rep, err = run(t.TempDir(), failing, nil)
	if err != nil || step(rep, "kernel").Result != engine.ResultOK || step(rep, "kernel").Details["cache_push_error"] == nil {
		t.Errorf("node D: %v, %+v", err, step(rep, "kernel"))
	}
}

// TestNoPushWhenTheTagCannotBeRead: a pushing node whose lookup of the step's tag fails
// (the artifact there is outside its cache.digests, or the registry answered with an
// error) does not push: the tag may exist, and a tag is never pushed twice, not even over
// an artifact this node does not accept. The step is ok and the report says why.
func TestNoPushWhenTheTagCannotBeRead(t *testing.T) {
	w := newWorld()
	mc := &memCache{push: true, lookupErr: errors.New("artifact sha256:abc is not in cache.digests")}
	e, err := engine.New(engine.Options{Recipe: loadCached(t, w), Registry: cachedRegistry(w), StateDir: t.TempDir(), Cache: mc})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if mc.pushes != 0 {
		t.Errorf("%d pushes over a tag that could not be read", mc.pushes)
	}
	k := rep.Steps[0]
	if k.Result != engine.ResultOK || k.Pushed != "" {
		t.Errorf("kernel: %s, pushed %q", k.Result, k.Pushed)
	}
	if e, _ := k.Details["cache_push_error"].(string); !strings.Contains(e, "not in cache.digests") {
		t.Errorf("the report does not say why nothing was pushed: %v", k.Details)
	}
}

// TestPlanAsksTheCacheAsApplyDoes: on a fresh pulling node, a step that takes its outputs
// from the fleet cache but whose needs run first (its key includes what they make) is not
// shown as a plain "new": plan asked the registry and says that apply asks again once the
// needs ran; a registry that does not answer is said to be offline.
func TestPlanAsksTheCacheAsApplyDoes(t *testing.T) {
	const withNeeds = `apiVersion: sglprov/v1
name: t
steps:
  - name: src
    fake: {}
  - name: kernel
    needs: [src]
    cached: {input: "a"}
`
	plan := func(c *memCache) engine.PlannedStep {
		t.Helper()
		w := newWorld()
		specs := recipe.KindSpecs{}
		for k, v := range cachedRegistry(w) {
			specs[k] = v.NewSpec
		}
		r, err := recipe.Parse("test.yaml", []byte(withNeeds), specs, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(engine.Options{Recipe: r, Registry: cachedRegistry(w), StateDir: t.TempDir(), Cache: c})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := e.Plan(context.Background())
		return p.Steps[1]
	}
	k := plan(&memCache{})
	if !k.Run || !strings.Contains(k.Reason, "the fleet cache mem has no artifact for it yet; apply asks again once src ran") {
		t.Errorf("fresh pulling node: %+v", k)
	}
	k = plan(&memCache{lookupErr: errors.New("dial tcp 10.0.0.9:5000: connect: connection refused")})
	if !strings.Contains(k.Reason, "cache offline (apply asks it again): dial tcp") {
		t.Errorf("registry down: %+v", k)
	}
}
