package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// spaceSpec is a step that needs some bytes of a disk that has some free.
type spaceSpec struct {
	Need int `yaml:"need"`
	Free int `yaml:"free"`
}

type spaceStep struct{ spec spaceSpec }

func (s *spaceStep) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (s *spaceStep) Intact(context.Context, *engine.Env) (bool, string, error) { return true, "", nil }
func (s *spaceStep) Run(context.Context, *engine.Env) error                    { return nil }

func (s *spaceStep) Preflight(ctx context.Context, env *engine.Env, slot engine.CacheSlot) ([]string, *engine.DiskNeed, error) {
	line := fmt.Sprintf("to fetch: %d B; free: %d B", s.spec.Need, s.spec.Free)
	if s.spec.Free < 0 {
		return []string{"to fetch: 1 B; free: unknown"}, nil, nil
	}
	if s.spec.Need > s.spec.Free {
		return []string{line}, nil, fmt.Errorf("%w: not enough free space", exitcode.ErrHost)
	}
	return []string{line}, nil, nil
}

// TestPlanPreflight: plan shows each step's preflight lines under it, and a problem marked
// exitcode.ErrHost is the step's error and plan's (exit 4), the plan complete all the same.
func TestPlanPreflight(t *testing.T) {
	reg := engine.Registry{"space": engine.KindOf(func(_ string, s spaceSpec) (*spaceStep, error) { return &spaceStep{s}, nil })}
	r, err := recipe.Parse("t.yaml", []byte(`apiVersion: sglprov/v1
name: t
steps:
  - name: fits
    space: {need: 10, free: 100}
  - name: too-big
    space: {need: 200, free: 100}
  - name: unknown
    space: {need: 1, free: -1}
`), recipe.KindSpecs{"space": reg["space"].NewSpec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Plan(context.Background())
	if !errors.Is(err, exitcode.ErrHost) || err.Error() != "step too-big: host does not meet the recipe's requirements: not enough free space" {
		t.Errorf("Plan error = %v", err)
	}
	got := map[string][]string{}
	for _, s := range p.Steps {
		got[s.Name] = s.Details
	}
	want := map[string][]string{
		"fits":    {"to fetch: 10 B; free: 100 B"},
		"too-big": {"to fetch: 200 B; free: 100 B"},
		"unknown": {"to fetch: 1 B; free: unknown"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("details (-want +got):\n%s", diff)
	}
	for _, s := range p.Steps {
		if (s.Error != "") != (s.Name == "too-big") {
			t.Errorf("step %s error %q", s.Name, s.Error)
		}
	}
}

// cachedSpaceStep checks from the fleet cache when it has one, as a download reads its
// listing from the registry.
type cachedSpaceStep struct {
	spaceStep
	slots []engine.CacheSlot
}

func (s *cachedSpaceStep) Preflight(ctx context.Context, env *engine.Env, slot engine.CacheSlot) ([]string, *engine.DiskNeed, error) {
	if slot.Cache == nil {
		return s.spaceStep.Preflight(ctx, env, slot)
	}
	s.slots = append(s.slots, slot)
	return []string{"from the cache"}, nil, nil
}

// TestPlanCachedPreflight: with a fleet cache, plan gives Preflight the cache and the
// step's fingerprint (the tag apply would use) as the slot; without one, a zero slot.
func TestPlanCachedPreflight(t *testing.T) {
	var built []*cachedSpaceStep
	reg := engine.Registry{"space": engine.KindOf(func(_ string, s spaceSpec) (*cachedSpaceStep, error) {
		st := &cachedSpaceStep{spaceStep: spaceStep{s}}
		built = append(built, st)
		return st, nil
	})}
	r, err := recipe.Parse("t.yaml", []byte(`apiVersion: sglprov/v1
name: t
steps:
  - name: weights
    space: {need: 10, free: 100}
`), recipe.KindSpecs{"space": reg["space"].NewSpec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc := &memCache{}
	for _, c := range []cache.Cache{nil, mc} {
		built = nil
		e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: t.TempDir(), Cache: c})
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Plan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ps := p.Steps[0]
		if c == nil {
			if diff := cmp.Diff([]string{"to fetch: 10 B; free: 100 B"}, ps.Details); diff != "" || len(built[0].slots) != 0 {
				t.Errorf("no cache: details (-want +got):\n%s; cached preflights: %d", diff, len(built[0].slots))
			}
			continue
		}
		if diff := cmp.Diff([]string{"from the cache"}, ps.Details); diff != "" {
			t.Errorf("with a cache: details (-want +got):\n%s", diff)
		}
		if len(built[0].slots) != 1 || built[0].slots[0].Cache != mc || ps.Fingerprint == "" || built[0].slots[0].Tag != ps.Fingerprint {
			t.Errorf("with a cache: slots %+v, fingerprint %q", built[0].slots, ps.Fingerprint)
		}
	}
}

// diskSpec is a step that needs some bytes of a file system (by id) that has some free.
type diskSpec struct {
	FS   uint64 `yaml:"fs"`
	Dir  string `yaml:"dir"`
	Need uint64 `yaml:"need"`
	Free uint64 `yaml:"free"`
}

type diskStep struct {
	spaceStep
	spec diskSpec
}

func (s *diskStep) Preflight(ctx context.Context, env *engine.Env, slot engine.CacheSlot) ([]string, *engine.DiskNeed, error) {
	need := &engine.DiskNeed{FS: s.spec.FS, Dir: s.spec.Dir, Need: s.spec.Need, Free: s.spec.Free}
	line := fmt.Sprintf("to fetch: %d B; free at %s: %d B", s.spec.Need, s.spec.Dir, s.spec.Free)
	if s.spec.Need > s.spec.Free {
		return []string{line}, need, fmt.Errorf("%w: not enough free space at %s", exitcode.ErrHost, s.spec.Dir)
	}
	return []string{line}, need, nil
}

// TestPlanSharedDisk: two steps whose folders share a file system and that each fit but
// together do not are one exitcode.ErrHost problem of plan (exit 4) naming both, the total and the
// free space, their own lines and errors unchanged; a step on another file system, and one
// that cannot fit on its own (its own problem), are not in the sum.
func TestPlanSharedDisk(t *testing.T) {
	reg := engine.Registry{"disk": engine.KindOf(func(_ string, s diskSpec) (*diskStep, error) { return &diskStep{spec: s}, nil })}
	r, err := recipe.Parse("t.yaml", []byte(`apiVersion: sglprov/v1
name: t
steps:
  - name: a
    disk: {fs: 1, dir: /models/a, need: 600, free: 1000}
  - name: other-fs
    disk: {fs: 2, dir: /scratch, need: 900, free: 1000}
  - name: b
    disk: {fs: 1, dir: /models/b, need: 500, free: 1000}
  - name: alone-too-big
    disk: {fs: 1, dir: /models/c, need: 5000, free: 1000}
`), recipe.KindSpecs{"disk": reg["disk"].NewSpec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Plan(context.Background())
	if !errors.Is(err, exitcode.ErrHost) || exitcode.Of(err) != exitcode.ExitHost {
		t.Fatalf("Plan error = %v, want exit 4", err)
	}
	want := "step alone-too-big: host does not meet the recipe's requirements: not enough free space at /models/c\n" +
		"steps a, b: host does not meet the recipe's requirements: not enough free space on the file system of /models/a, /models/b for all of them: 1.1 KiB to fetch together, 1000 B free"
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("Plan error (-want +got):\n%s", diff)
	}
	for _, s := range p.Steps {
		if (s.Error != "") != (s.Name == "alone-too-big") || len(s.Details) != 1 || !strings.HasPrefix(s.Details[0], "to fetch: ") {
			t.Errorf("step %s: error %q, details %q", s.Name, s.Error, s.Details)
		}
	}

	// Within the free space together: no problem.
	r, err = recipe.Parse("t.yaml", []byte(`apiVersion: sglprov/v1
name: t
steps:
  - name: a
    disk: {fs: 1, dir: /models/a, need: 500, free: 1000}
  - name: b
    disk: {fs: 1, dir: /models/b, need: 500, free: 1000}
`), recipe.KindSpecs{"disk": reg["disk"].NewSpec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err = engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Plan(context.Background()); err != nil {
		t.Errorf("Plan of two that fit together = %v", err)
	}
}

// publishingSpaceStep publishes to the fleet cache and reads its artifact in its cached
// preflight, as a download reads its listing.
type publishingSpaceStep struct {
	spaceStep
	got []string
}

func (s *publishingSpaceStep) Publish(ctx context.Context, env *engine.Env, slot engine.CacheSlot) (string, error) {
	return "", nil
}

func (s *publishingSpaceStep) Preflight(ctx context.Context, env *engine.Env, slot engine.CacheSlot) ([]string, *engine.DiskNeed, error) {
	if slot.Cache == nil {
		return s.spaceStep.Preflight(ctx, env, slot)
	}
	a, err := slot.Lookup(ctx)
	if err != nil {
		return nil, nil, err
	}
	if a != nil {
		s.got = append(s.got, a.Digest)
	}
	return []string{"from the cache"}, nil, nil
}

// TestPlanLooksUpOnce: plan asks the registry for a step's tag once, for its "from cache"
// note, and the step's cached preflight gets that same answer from its slot.
func TestPlanLooksUpOnce(t *testing.T) {
	var built *publishingSpaceStep
	reg := engine.Registry{"space": engine.KindOf(func(_ string, s spaceSpec) (*publishingSpaceStep, error) {
		built = &publishingSpaceStep{spaceStep: spaceStep{s}}
		return built, nil
	})}
	r, err := recipe.Parse("t.yaml", []byte(`apiVersion: sglprov/v1
name: t
steps:
  - name: weights
    space: {need: 10, free: 100}
`), recipe.KindSpecs{"space": reg["space"].NewSpec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc := &memCache{}
	e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: t.TempDir(), Cache: mc})
	if err != nil {
		t.Fatal(err)
	}
	p0, err := e.Plan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("a", 64)
	mc.artifacts = map[string]*cache.Artifact{p0.Steps[0].Fingerprint: {Digest: digest, Tag: p0.Steps[0].Fingerprint, Kind: cache.KindDownload}}
	mc.lookups, built.got = 0, nil
	p, err := e.Plan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Steps[0].FromCache != digest || len(built.got) != 1 || built.got[0] != digest || mc.lookups != 1 {
		t.Errorf("from cache %q, preflight saw %q, lookups %d; want %s, it, 1", p.Steps[0].FromCache, built.got, mc.lookups, digest)
	}
}
