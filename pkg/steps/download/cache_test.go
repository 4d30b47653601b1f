package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/test/fakehub"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// TestFleetCache: node A downloads from the hub and publishes; node B takes the listing
// and the files from the registry, except one whose blob the registry serves corrupted:
// that file alone comes from the origin. With the registry down, node C asks the origin
// for everything.
func TestFleetCache(t *testing.T) {
	ctx := context.Background()
	reg, fx, pusher, puller := fleetFixture(t)
	fingerprint := strings.Repeat("0f", 32)
	spec := fx.hfSpec(fx.hub.Commit())
	// The test counts the bytes the origin serves: on a loaded machine a slow registry
	// answer must not count as a stall that sends a file to the origin.
	spec.StallTimeout, spec.Retries = "60s", 3

	// Node A.
	slotA := engine.CacheSlot{Cache: pusher, Tag: fingerprint}
	a := fx.step(t, spec, nil)
	if err := a.RunCached(ctx, fx.env, slotA); err != nil {
		t.Fatal(err)
	}
	digest, err := a.Publish(ctx, fx.env, slotA)
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("Publish = %q, %v", digest, err)
	}

	// The registry now serves one shard's blob with other bytes of the same size.
	shard := "model-00002-of-00003.safetensors"
	want, err := os.ReadFile(filepath.Join(fx.src, shard))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(want)
	hexsum := hex.EncodeToString(sum[:])
	blob := filepath.Join(reg.Dir, "storage", "docker", "registry", "v2", "blobs", "sha256", hexsum[:2], hexsum, "data")
	if err := os.WriteFile(blob, bytes.Repeat([]byte{'!'}, len(want)), 0o644); err != nil {
		t.Fatal(err)
	}

	// Node B.
	newNode := func() (*engine.Env, string, *syncBuffer) {
		dir := t.TempDir()
		log := &syncBuffer{}
		env := engine.NewTestEnv(dir, log)
		env.StepName = "weights"
		return env, filepath.Join(dir, "models", "m"), log
	}
	slotB := engine.CacheSlot{Cache: puller, Tag: fingerprint}
	envB, destB, logB := newNode()
	specB := spec
	specB.Dest = destB
	fx.hub.ResetCounters()
	if err := fx.step(t, specB, nil).RunCached(ctx, envB, slotB); err != nil {
		t.Fatalf("node B: %v\n%s", err, logB)
	}
	if n := fx.hub.APIRequests(); n != 1 {
		t.Errorf("node B made %d hub API requests; the listing is in the registry, and only the file that falls back is looked up in the origin's (one tree request)", n)
	}
	if got := fx.hub.BytesServed(); got != int64(len(want)) {
		t.Errorf("the origin served %d bytes to node B, want only the corrupted shard's %d; node B's log:\n%s", got, len(want), logB)
	}
	for _, name := range []string{"model-00001-of-00003.safetensors", shard, "model-00003-of-00003.safetensors", "config.json", "model.safetensors.index.json"} {
		src, _ := os.ReadFile(filepath.Join(fx.src, name))
		got, err := os.ReadFile(filepath.Join(destB, name))
		if err != nil || !bytes.Equal(src, got) {
			t.Errorf("node B: %s differs from the origin's (%v)", name, err)
		}
	}
	if !strings.Contains(logB.String(), "fetching a file from the cache failed; fetching it from the origin") || !strings.Contains(logB.String(), shard) {
		t.Errorf("node B's log does not say which file fell back to the origin:\n%s", logB)
	}

	// Node C: the registry is down; the origin serves all, and the log says why.
	reg.Stop()
	envC, destC, logC := newNode()
	specC := spec
	specC.Dest = destC
	fx.hub.ResetCounters()
	if err := fx.step(t, specC, nil).RunCached(ctx, envC, slotB); err != nil {
		t.Fatalf("node C: %v\n%s", err, logC)
	}
	if fx.hub.APIRequests() == 0 {
		t.Error("node C never asked the hub for the listing")
	}
	if !strings.Contains(logC.String(), "cannot read the listing from the cache; asking the origin") {
		t.Errorf("node C's log does not say why it asked the origin:\n%s", logC)
	}
}

// TestCacheListingOutsideTheStep: a listing pushed under the step's tag that names a file
// the step's include and exclude leave out (code the server would import, say) or one in
// the downloader's work folder, or that lists another commit than the recipe pins, is not
// taken: the node asks the hub, and only the files
// the recipe asks for are written.
func TestCacheListingOutsideTheStep(t *testing.T) {
	ctx := context.Background()
	reg := ociregistry.StartT(t)
	for _, tc := range []struct {
		name, path, commit string
		twice              bool
	}{
		{"not included", "modeling_evil.py", "", false},
		{"excluded", "tokenizer.model.bak", "", false},
		{"in the work folder", ".sglprov/parts/x", "", false},
		{"another commit than the recipe pins", "config.json", strings.Repeat("1", 40), false},
		{"a file listed twice", "config.json", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, fakehub.Options{})
			c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/evil", Push: true}, cache.Options{})
			if err != nil {
				t.Fatal(err)
			}
			evil := []byte("import os; os.system('id')\n")
			p := filepath.Join(t.TempDir(), "evil")
			if err := os.WriteFile(p, evil, 0o644); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(evil)
			hexsum := hex.EncodeToString(sum[:])
			commit := fx.hub.Commit()
			if tc.commit != "" {
				commit = tc.commit
			}
			listing := cacheListing{Repo: repo, Revision: commit, Commit: commit,
				Files: []listedFile{{Path: tc.path, Size: int64(len(evil)), SHA256: hexsum}}}
			if tc.twice {
				listing.Files = append(listing.Files, listing.Files[0])
			}
			meta, _ := json.Marshal(listing)
			tag := strings.Repeat("e1", 32)
			if _, err := c.Push(ctx, tag, cache.KindDownload, meta, []cache.File{{Name: tc.path, Path: p, Size: int64(len(evil)), SHA256: hexsum}}); err != nil {
				t.Fatal(err)
			}
			spec := fx.hfSpec(fx.hub.Commit())
			spec.HF.Exclude = []string{"*.bak"}
			if err := fx.step(t, spec, nil).RunCached(ctx, fx.env, engine.CacheSlot{Cache: c, Tag: tag}); err != nil {
				t.Fatalf("%v\n%s", err, fx.log)
			}
			if got, err := os.ReadFile(filepath.Join(fx.dest, filepath.FromSlash(tc.path))); err == nil && bytes.Equal(got, evil) {
				t.Errorf("%s was written from the cache's listing", tc.path)
			}
			if !strings.Contains(fx.log.String(), "ignoring the cache's listing") {
				t.Errorf("the log does not say the listing was ignored:\n%s", fx.log)
			}
			if fx.hub.APIRequests() == 0 {
				t.Error("the hub was not asked for the listing")
			}
			fx.sameAsSource(t)
		})
	}
}

// TestFleetCacheThatNeverAnswers: a registry that accepts connections and never answers
// costs the step one timeout, said in the log, and every file comes from the origin.
func TestFleetCacheThatNeverAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conns := make(chan net.Conn, 64)
	defer func() {
		l.Close()
		for c := range conns {
			c.Close()
		}
	}()
	go func() {
		defer close(conns)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	c, err := cache.New(cache.Config{Repository: l.Addr().String() + "/fleet/weights"}, cache.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, fakehub.Options{})
	start := time.Now()
	if err := fx.step(t, fx.hfSpec(fx.hub.Commit()), nil).RunCached(context.Background(), fx.env, engine.CacheSlot{Cache: c, Tag: strings.Repeat("0f", 32)}); err != nil {
		t.Fatalf("%v\n%s", err, fx.log)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the step took %s with a registry timeout of 1s", d)
	}
	if !strings.Contains(fx.log.String(), "did not answer within 1s") {
		t.Errorf("the log does not say the registry did not answer:\n%s", fx.log)
	}
	fx.sameAsSource(t)
}

// A `files:` download with a cache: the pushing node publishes, a pulling node takes the
// files from the registry, and the pushing node run again with --force (RunCached with
// the artifact there) downloads again; none of them panics on the revision a `files:`
// source does not have.
func TestFilesDownloadWithACache(t *testing.T) {
	ctx := context.Background()
	reg := ociregistry.StartT(t)
	src := t.TempDir()
	body := bytes.Repeat([]byte("w"), 40<<10)
	writeSrc(t, src, map[string][]byte{"w.bin": body})
	srv := fileServer(t, src, nil)
	pusher, puller := cachePair(t, reg.Addr+"/fleet/files")
	tag := strings.Repeat("1f", 32)
	node := func() (*engine.Env, Spec, *syncBuffer) {
		dir := t.TempDir()
		log := &syncBuffer{}
		env := engine.NewTestEnv(dir, log)
		env.StepName = "weights"
		return env, Spec{Dest: filepath.Join(dir, "w"), StallTimeout: "5s",
			Files: []FileSpec{{URL: srv.URL + "/w.bin", Path: "w.bin", Size: int64(len(body)), SHA256: sum(body)}}}, log
	}
	fx := &fixture{}
	envA, specA, logA := node()
	slotA := engine.CacheSlot{Cache: pusher, Tag: tag}
	if err := fx.step(t, specA, nil).RunCached(ctx, envA, slotA); err != nil {
		t.Fatalf("pushing node: %v\n%s", err, logA)
	}
	if _, err := fx.step(t, specA, nil).Publish(ctx, envA, slotA); err != nil {
		t.Fatal(err)
	}
	envB, specB, logB := node()
	if err := fx.step(t, specB, nil).RunCached(ctx, envB, engine.CacheSlot{Cache: puller, Tag: tag}); err != nil {
		t.Fatalf("pulling node: %v\n%s", err, logB)
	}
	if got, err := os.ReadFile(filepath.Join(specB.Dest, "w.bin")); err != nil || !bytes.Equal(got, body) {
		t.Errorf("pulling node: w.bin = %d bytes, %v", len(got), err)
	}
	if !strings.Contains(logB.String(), "downloading from the cache") {
		t.Errorf("the pulling node did not take the file from the cache:\n%s", logB)
	}
	// --force on the pushing node: the step runs again with its artifact in the registry.
	if err := os.Remove(filepath.Join(specA.Dest, "w.bin")); err != nil {
		t.Fatal(err)
	}
	if err := fx.step(t, specA, nil).RunCached(ctx, envA, slotA); err != nil {
		t.Fatalf("pushing node, forced: %v\n%s", err, logA)
	}
}

// TestCacheListingWithAWrongSize: a cached listing that gives one file a wrong size (one
// byte more, or one less) costs that file its fetch from the registry, and the fallback
// takes the origin's listing: the step succeeds, with the origin's bytes, and the log
// names the difference.
func TestCacheListingWithAWrongSize(t *testing.T) {
	ctx := context.Background()
	reg := ociregistry.StartT(t)
	for i, delta := range []int64{+1, -1} {
		t.Run(fmt.Sprintf("%+d", delta), func(t *testing.T) {
			fx := newFixture(t, fakehub.Options{})
			c, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/wrongsize", Push: true}, cache.Options{})
			if err != nil {
				t.Fatal(err)
			}
			spec := fx.hfSpec(fx.hub.Commit())
			good := engine.CacheSlot{Cache: c, Tag: strings.Repeat(fmt.Sprint(i), 64)}
			a := fx.step(t, spec, nil)
			if err := a.RunCached(ctx, fx.env, good); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Publish(ctx, fx.env, good); err != nil {
				t.Fatal(err)
			}
			art, err := c.Lookup(ctx, good.Tag)
			if err != nil || art == nil {
				t.Fatalf("Lookup = %v, %v", art, err)
			}
			var l cacheListing
			if err := json.Unmarshal(art.Meta, &l); err != nil {
				t.Fatal(err)
			}
			shard := "model-00002-of-00003.safetensors"
			var files []cache.File
			for j, f := range l.Files {
				files = append(files, cache.File{Name: f.Path, Path: filepath.Join(fx.dest, f.Path), Size: f.Size, SHA256: f.SHA256})
				if f.Path == shard {
					l.Files[j].Size += delta
				}
			}
			meta, _ := json.Marshal(l)
			bad := engine.CacheSlot{Cache: c, Tag: strings.Repeat(fmt.Sprint(i+5), 64)}
			if _, err := c.Push(ctx, bad.Tag, cache.KindDownload, meta, files); err != nil {
				t.Fatal(err)
			}

			dir := t.TempDir()
			log := &syncBuffer{}
			env := engine.NewTestEnv(dir, log)
			env.StepName = "weights"
			specB := spec
			specB.Dest = filepath.Join(dir, "models", "m")
			if err := fx.step(t, specB, nil).RunCached(ctx, env, bad); err != nil {
				t.Fatalf("node B: %v\n%s", err, log)
			}
			want, _ := os.ReadFile(filepath.Join(fx.src, shard))
			if got, err := os.ReadFile(filepath.Join(specB.Dest, shard)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes (%v), want the origin's %d", shard, len(got), err, len(want))
			}
			if !strings.Contains(log.String(), "the cache's listing differs from the origin's") || !strings.Contains(log.String(), shard) {
				t.Errorf("the log does not name the difference:\n%s", log)
			}
		})
	}
}

// TestCacheLacksAFileAndTheHubIsDown: the registry holds the listing but not one file's
// blob, and the hub does not answer: the step fails once the network budget is spent,
// naming the file and the budget, not after a second budget of no_progress_timeout on
// the same dead host.
func TestCacheLacksAFileAndTheHubIsDown(t *testing.T) {
	ctx := context.Background()
	reg, fx, pusher, puller := fleetFixture(t)
	slot := engine.CacheSlot{Cache: pusher, Tag: strings.Repeat("0e", 32)}
	spec := fx.hfSpec(fx.hub.Commit())
	spec.StallTimeout, spec.NoProgressTimeout = "60s", "10m"
	a := fx.step(t, spec, nil)
	if err := a.RunCached(ctx, fx.env, slot); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(ctx, fx.env, slot); err != nil {
		t.Fatal(err)
	}
	// The registry loses one shard's blob; the hub goes away.
	shard := "model-00003-of-00003.safetensors"
	b, err := os.ReadFile(filepath.Join(fx.src, shard))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	hexsum := hex.EncodeToString(sum[:])
	if err := os.RemoveAll(filepath.Join(reg.Dir, "storage", "docker", "registry", "v2", "blobs", "sha256", hexsum[:2], hexsum)); err != nil {
		t.Fatal(err)
	}
	fx.hub.Close()

	dir := t.TempDir()
	log := &syncBuffer{}
	env := engine.NewTestEnv(dir, log)
	env.StepName = "weights"
	env.NetworkRetryFor = time.Second
	specB := spec
	specB.Dest = filepath.Join(dir, "models", "m")
	st := fx.step(t, specB, nil)
	st.retryWait = 100 * time.Millisecond
	start := time.Now()
	err = st.RunCached(ctx, env, engine.CacheSlot{Cache: puller, Tag: slot.Tag})
	if err == nil {
		t.Fatalf("node B succeeded without the shard's bytes\n%s", log)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("node B failed after %s with a 1s network budget: a second budget was waited out", took)
	}
	for _, want := range []string{shard, "network.retry_for", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
	if !strings.Contains(log.String(), "the registry lacks files of this step") {
		t.Errorf("the log does not say the registry lacks a file:\n%s", log)
	}
	// What the registry held is in place and verified: a later run fetches only the shard.
	for _, name := range []string{"model-00001-of-00003.safetensors", "config.json"} {
		want, _ := os.ReadFile(filepath.Join(fx.src, name))
		if got, err := os.ReadFile(filepath.Join(specB.Dest, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s not taken from the registry (%v)", name, err)
		}
	}
}

// fleetFixture starts a registry and a fake hub's fixture, and returns the registry, the
// fixture and a pushing and a pulling cache on one repository of it.
func fleetFixture(t *testing.T) (*ociregistry.Registry, *fixture, *cache.Registry, *cache.Registry) {
	t.Helper()
	reg := ociregistry.StartT(t)
	pusher, puller := cachePair(t, reg.Addr+"/fleet/weights")
	return reg, newFixture(t, fakehub.Options{}), pusher, puller
}

// cachePair returns a pushing and a pulling cache on the repository repoRef.
func cachePair(t *testing.T, repoRef string) (pusher, puller *cache.Registry) {
	t.Helper()
	pusher, err := cache.New(cache.Config{Repository: repoRef, Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	puller, err = cache.New(cache.Config{Repository: repoRef}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return pusher, puller
}
