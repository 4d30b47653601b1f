package download

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/test/fakehub"
)

// TestPreflightPlanText: plan's line for a hub download says the bytes still to fetch
// (from the hub's listing) and the free space at dest; after the download nothing is left;
// a part on disk counts as fetched; too little space is an ErrHost problem; an unreachable
// hub is "unknown".
func TestPreflightPlanText(t *testing.T) {
	fx := newFixture(t, fakehub.Options{})
	st := fx.step(t, fx.hfSpec("main"), nil)
	ctx := context.Background()
	var total int64
	for _, n := range fx.srcFiles(t) {
		fi, _ := os.Stat(filepath.Join(fx.src, n))
		total += fi.Size()
	}
	lines, _, err := st.Preflight(ctx, fx.env, engine.CacheSlot{})
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^to fetch: (\S+ \S+) of (\S+ \S+) \(7 files\); free at ` + regexp.QuoteMeta(fx.dest) + `: 1.0 TiB$`)
	m := re.FindStringSubmatch(strings.Join(lines, "\n"))
	if m == nil || m[1] != m[2] {
		t.Fatalf("lines = %q", lines)
	}

	// Too little space: a problem marked for exit 4, with the line still there.
	st.freeSpace = func(string) (uint64, error) { return 1000, nil }
	lines, _, err = st.Preflight(ctx, fx.env, engine.CacheSlot{})
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "not enough free space at "+fx.dest+": ") || !strings.Contains(err.Error(), ", 1000 B free") || len(lines) != 1 {
		t.Errorf("small disk: %q, %v", lines, err)
	}
	// apply refuses it too, before the first byte, with the same exit code.
	if err := st.Run(ctx, fx.env); exitcode.Of(err) != exitcode.ExitHost || !strings.Contains(err.Error(), "not enough free space") {
		t.Errorf("Run on a small disk = %v (exit %d), want exit 4", err, exitcode.Of(err))
	}
	st.freeSpace = func(string) (uint64, error) { return 1 << 40, nil }

	if err := st.Run(ctx, fx.env); err != nil {
		t.Fatal(err)
	}
	lines, _, _ = st.Preflight(ctx, fx.env, engine.CacheSlot{})
	if !strings.HasPrefix(lines[0], "to fetch: 0 B of ") {
		t.Errorf("after the download: %q", lines)
	}

	// Half a shard as a part: only the rest is to fetch.
	shard := filepath.Join(fx.dest, "model-00001-of-00003.safetensors")
	b, _ := os.ReadFile(shard)
	os.Remove(shard)
	part := fetch.PartPath(fx.dest, "model-00001-of-00003.safetensors")
	os.MkdirAll(filepath.Dir(part), 0o755)
	os.WriteFile(part, b[:len(b)/2], 0o644)
	lines, _, _ = st.Preflight(ctx, fx.env, engine.CacheSlot{})
	want := "to fetch: " + formatLike(int64(len(b)-len(b)/2))
	if !strings.HasPrefix(lines[0], want+" of ") {
		t.Errorf("with a part: %q, want prefix %q", lines, want)
	}

	// No hub: unknown, and no problem.
	spec := fx.hfSpec("main")
	spec.HF.Endpoint = "http://127.0.0.1:1"
	st2 := fx.step(t, spec, nil)
	lines, _, err = st2.Preflight(ctx, fx.env, engine.CacheSlot{})
	if err != nil || !strings.HasPrefix(lines[0], "to fetch: unknown (hub not reachable: ") || !strings.HasSuffix(lines[0], "; free at "+fx.dest+": 1.0 TiB") {
		t.Errorf("no hub: %q, %v", lines, err)
	}
}

func formatLike(n int64) string {
	return strings.TrimSpace(fetch.FormatBytes(n))
}

// TestPreflightFromCache: with the fleet cache, plan takes the listing (names, sizes,
// sha256) from the step's artifact as apply does, so a node whose hub is out of reach
// still says what is left to fetch; without the artifact, or with one the step's include
// and exclude do not fit, it asks the hub, and that is "unknown".
func TestPreflightFromCache(t *testing.T) {
	ctx := context.Background()
	_, fx, pusher, puller := fleetFixture(t)
	fingerprint := strings.Repeat("0f", 32)
	spec := fx.hfSpec(fx.hub.Commit())

	// Node A downloads from the hub and publishes.
	slotA := engine.CacheSlot{Cache: pusher, Tag: fingerprint}
	a := fx.step(t, spec, nil)
	if err := a.RunCached(ctx, fx.env, slotA); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(ctx, fx.env, slotA); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range fx.srcFiles(t) {
		fi, _ := os.Stat(filepath.Join(fx.src, n))
		total += fi.Size()
	}

	// Node B: nothing on disk, and the hub gone.
	fx.hub.Close()
	dir := t.TempDir()
	log := &syncBuffer{}
	envB := engine.NewTestEnv(dir, log)
	envB.StepName = "weights"
	specB := spec
	specB.Dest = filepath.Join(dir, "models", "m")
	b := fx.step(t, specB, nil)
	slotB := engine.CacheSlot{Cache: puller, Tag: fingerprint}
	lines, _, err := b.Preflight(ctx, envB, slotB)
	size := fetch.FormatBytes(total)
	want := "to fetch: " + size + " of " + size + " (7 files); free at " + specB.Dest + ": 1.0 TiB"
	if err != nil || len(lines) != 1 || lines[0] != want {
		t.Errorf("Preflight = %q, %v; want %q\n%s", lines, err, want, log)
	}

	// A part on disk counts as fetched, as it does with the hub's listing.
	shard := "model-00001-of-00003.safetensors"
	sb, _ := os.ReadFile(filepath.Join(fx.src, shard))
	part := fetch.PartPath(specB.Dest, shard)
	os.MkdirAll(filepath.Dir(part), 0o755)
	os.WriteFile(part, sb[:len(sb)/2], 0o644)
	lines, _, _ = b.Preflight(ctx, envB, slotB)
	if wantPrefix := "to fetch: " + fetch.FormatBytes(total-int64(len(sb)/2)) + " of " + size + " (7 files)"; len(lines) != 1 || !strings.HasPrefix(lines[0], wantPrefix) {
		t.Errorf("with a part: %q, want prefix %q", lines, wantPrefix)
	}
	os.Remove(part)

	// Without the cache, or another fingerprint's tag: the hub, out of reach.
	for name, slot := range map[string]engine.CacheSlot{"no cache": {}, "another tag": {Cache: puller, Tag: strings.Repeat("1e", 32)}} {
		lines, _, err := b.Preflight(ctx, envB, slot)
		if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "to fetch: unknown (hub not reachable: ") {
			t.Errorf("%s: %q, %v", name, lines, err)
		}
	}

	// A listing the step's selection does not fit is not taken, as apply does not take it.
	specX := specB
	specX.HF = &HFSpec{Repo: spec.HF.Repo, Revision: spec.HF.Revision, Endpoint: spec.HF.Endpoint,
		Include: spec.HF.Include, Exclude: []string{"tokenizer*"}}
	lines, _, err = fx.step(t, specX, nil).Preflight(ctx, envB, slotB)
	if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "to fetch: unknown (hub not reachable: ") {
		t.Errorf("a listing that does not fit: %q, %v", lines, err)
	}
	if !strings.Contains(log.String(), "ignoring the cache's listing") {
		t.Errorf("the log does not say the listing was ignored:\n%s", log)
	}
}

// TestPlanTwoDownloadsOneDisk: two downloads whose dests are on one file system (two
// folders of one temporary directory, not yet there) each fit in its free space and
// together do not: plan fails with exit 4 and names both, the total and the free space,
// each step's own line as before; with room for both, plan passes.
func TestPlanTwoDownloadsOneDisk(t *testing.T) {
	dir := t.TempDir()
	sum := strings.Repeat("ab", 32)
	yaml := `apiVersion: sglprov/v1
name: t
steps:
  - name: weights-a
    download:
      dest: ` + filepath.Join(dir, "models", "a") + `
      files: [{url: "https://models.example/a.bin", path: a.bin, size: 600, sha256: ` + sum + `}]
  - name: weights-b
    download:
      dest: ` + filepath.Join(dir, "models", "b") + `
      files: [{url: "https://models.example/b.bin", path: b.bin, size: 500, sha256: ` + sum + `}]
`
	for _, tc := range []struct {
		free uint64
		fail bool
	}{{1000, true}, {1100, false}} {
		reg := engine.Registry{"download": engine.KindOf(func(_ string, s Spec) (*Step, error) {
			st, err := New(s)
			if err == nil {
				st.freeSpace = func(string) (uint64, error) { return tc.free, nil }
			}
			return st, err
		})}
		r, err := recipe.Parse("t.yaml", []byte(yaml), recipe.KindSpecs{"download": reg["download"].NewSpec}, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Plan(context.Background())
		if !tc.fail {
			if err != nil {
				t.Errorf("free %d: Plan = %v", tc.free, err)
			}
			continue
		}
		want := "steps weights-a, weights-b: host does not meet the recipe's requirements: not enough free space on the file system of " +
			filepath.Join(dir, "models", "a") + ", " + filepath.Join(dir, "models", "b") + " for all of them: 1.1 KiB to fetch together, 1000 B free"
		if exitcode.Of(err) != exitcode.ExitHost || err.Error() != want {
			t.Errorf("free %d: Plan = %v (exit %d), want %q (exit 4)", tc.free, err, exitcode.Of(err), want)
		}
		for _, s := range p.Steps {
			if s.Error != "" || len(s.Details) != 1 || !strings.HasPrefix(s.Details[0], "to fetch: ") || !strings.HasSuffix(s.Details[0], ": 1000 B") {
				t.Errorf("step %s: error %q, details %q", s.Name, s.Error, s.Details)
			}
		}
	}
}

// TestPreflightGatedRepo: the hub answers the API of a gated repository to anyone and
// refuses only resolve, so plan probes one file's resolve: without a token that has
// access, plan stops (exit 4) naming the cause and the fix; with one, it passes.
func TestPreflightGatedRepo(t *testing.T) {
	const denied = "hf_deniedDENIEDdenied"
	fx := newFixture(t, fakehub.Options{Token: secret, DeniedTokens: []string{denied}})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no token", nil, []string{"401", "GatedRepo", "accept its licence at", "hf.token_file (or HF_TOKEN)"}},
		{"token without access", map[string]string{"HF_TOKEN": denied}, []string{"403", "GatedRepo", "no access", "accept the licence"}},
		{"unknown token", map[string]string{"HF_TOKEN": "hf_madeUPmadeUP"}, []string{"401", "does not know this token", "settings/tokens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, _, err := fx.step(t, fx.hfSpec("main"), tc.env).Preflight(ctx, fx.env, engine.CacheSlot{})
			if exitcode.Of(err) != exitcode.ExitHost {
				t.Fatalf("Preflight = %q, %v (exit %d), want exit 4", lines, err, exitcode.Of(err))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, tok := range tc.env {
				if strings.Contains(err.Error(), tok) {
					t.Errorf("error %q shows the token", err)
				}
			}
		})
	}
	if _, _, err := fx.step(t, fx.hfSpec("main"), map[string]string{"HF_TOKEN": secret}).Preflight(ctx, fx.env, engine.CacheSlot{}); err != nil {
		t.Errorf("with a token that has access: %v", err)
	}
}
