package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
)

const serverRecipe = `apiVersion: sglprov/v1
name: %s
%s
steps:
  - name: service
    fake: {unit: %s.service}
`

// Two recipes whose servers would run on the same GPUs are refused on one node (exit 4,
// naming the other recipe and the GPUs), unless one replaces the other or their
// requires.gpu.devices do not overlap.
func TestGPUClaimsOverlapRefused(t *testing.T) {
	w := newWorld()
	host := &gpu.Facts{GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}, {Index: 2, UUID: "GPU-2"}, {Index: 3, UUID: "GPU-3"}}}
	half := func(devices ...string) *gpu.Facts {
		s, err := host.Subset(devices)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := func(dir, name, extra string, facts *gpu.Facts) error {
		e := newEngine(t, w, load(t, w, fmt.Sprintf(serverRecipe, name, extra, name)), dir, func(o *engine.Options) { o.Facts = facts })
		_, err := e.Apply(context.Background())
		return err
	}

	dir := t.TempDir()
	if err := run(dir, "model-a", "", host); err != nil {
		t.Fatal(err)
	}
	err := run(dir, "model-b", "", host)
	if !errors.Is(err, exitcode.ErrHost) || exitcode.Of(err) != 4 || !strings.Contains(err.Error(), "recipe model-a serves on GPU-0, GPU-1, GPU-2, GPU-3") {
		t.Fatalf("a second whole-node recipe: %v, want exit 4 naming model-a and its GPUs", err)
	}
	if err := run(dir, "model-b", "replaces: [model-a]", host); err != nil {
		t.Errorf("a recipe that replaces the other: %v", err)
	}

	dir = t.TempDir()
	if err := run(dir, "model-a", "", half("0", "1")); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "model-b", "", half("2", "3")); err != nil {
		t.Errorf("disjoint devices refused: %v", err)
	}
	if err := run(dir, "model-c", "", half("1", "2")); !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "model-a serves on GPU-1") || !strings.Contains(err.Error(), "model-b serves on GPU-2") {
		t.Errorf("overlapping devices: %v, want both recipes named", err)
	}

	// A recipe whose run failed serves nowhere: it claims no GPU.
	dir = t.TempDir()
	failing := load(t, w, strings.Replace(fmt.Sprintf(serverRecipe, "model-x", "", "model-x"), "fake: {", "fake: {fail: true, ", 1))
	if _, err := newEngine(t, w, failing, dir, func(o *engine.Options) { o.Facts = host }).Apply(context.Background()); err == nil {
		t.Fatal("the failing recipe passed")
	}
	if err := run(dir, "model-a", "", host); err != nil {
		t.Errorf("a recipe beside one that never served: %v", err)
	}
}

// Under the exec manager replaces: is not applied (nothing stops the replaced recipe's
// server): it does not waive the GPU claims either. The recipe is refused, saying why.
func TestGPUClaimsReplacesUnderExecNotWaived(t *testing.T) {
	w := newWorld()
	host := &gpu.Facts{GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}}
	dir := t.TempDir()
	run := func(text string) error {
		e := newEngine(t, w, load(t, w, text), dir, func(o *engine.Options) { o.Facts = host })
		_, err := e.Apply(context.Background())
		return err
	}
	exec := "apiVersion: sglprov/v1\nname: %s\n%s\nsteps:\n  - name: service\n    fake: {unit: %s.service, manager: exec}\n"
	if err := run(fmt.Sprintf(exec, "model-a", "", "model-a")); err != nil {
		t.Fatal(err)
	}
	err := run(fmt.Sprintf(exec, "model-b", "replaces: [model-a]", "model-b"))
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "recipe model-a serves on GPU-0, GPU-1 (this recipe replaces it, but its service manager cannot stop") {
		t.Errorf("replaces under the exec manager: %v, want exit 4 saying replaces: is not applied", err)
	}
}

// A recipe applied from another state dir is seen through the node-wide claims: a second
// whole-node recipe (or the same recipe) applied with its own state dir is refused, naming
// the other state dir; once the other recipe's records are gone (removed there), its claim
// is stale and nothing is refused. A recipe that claims no GPU any more leaves no claim.
func TestGPUClaimsAcrossStateDirs(t *testing.T) {
	w := newWorld()
	host := &gpu.Facts{GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}}
	claims := t.TempDir()
	run := func(dir, name string) error {
		e := newEngine(t, w, load(t, w, fmt.Sprintf(serverRecipe, name, "", name)), dir, func(o *engine.Options) {
			o.Facts = host
			o.ClaimsDir = claims
		})
		_, err := e.Apply(context.Background())
		return err
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	if err := run(dirA, "model-a"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model-b", "model-a"} {
		err := run(dirB, name)
		want := "recipe model-a, applied with state dir " + dirA + ", serves on GPU-0, GPU-1"
		if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s from another state dir: %v, want exit 4 with %q", name, err, want)
		}
	}
	// model-a's records leave dirA (sglprov remove): its claim no longer holds.
	f, err := engine.LoadStates(dirA)
	if err != nil {
		t.Fatal(err)
	}
	delete(f.Recipes, "model-a")
	if err := engine.SaveStates(dirA, f); err != nil {
		t.Fatal(err)
	}
	if err := run(dirB, "model-b"); err != nil {
		t.Errorf("beside a removed recipe's stale claim: %v", err)
	}
	if err := run(dirA, "model-a"); err == nil || !strings.Contains(err.Error(), "recipe model-b, applied with state dir "+dirB) {
		t.Errorf("model-a back from its own state dir: %v, want model-b named", err)
	}
}

// A recipe that names no GPU need (no requires.gpu: no facts loaded) still runs its
// server on every GPU of the host: it claims them all, and a second one is refused, as is
// a recipe that does load facts; it is refused beside one that claims some too.
func TestGPUClaimsWithoutRequires(t *testing.T) {
	w := newWorld()
	host := &gpu.Facts{GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}}
	run := func(dir, name string, facts *gpu.Facts) error {
		e := newEngine(t, w, load(t, w, fmt.Sprintf(serverRecipe, name, "", name)), dir, func(o *engine.Options) {
			o.Facts = facts
			if facts == nil {
				o.NodeGPUs = host.IDs()
			}
		})
		_, err := e.Apply(context.Background())
		return err
	}
	dir := t.TempDir()
	if err := run(dir, "model-a", nil); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "model-b", nil); !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "recipe model-a serves on GPU-0, GPU-1") {
		t.Errorf("a second recipe without requires.gpu: %v, want exit 4 naming model-a", err)
	}
	one, err := host.Subset([]string{"1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "model-c", one); !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "recipe model-a serves on GPU-1") {
		t.Errorf("a recipe on GPU 1 beside one without requires.gpu: %v, want exit 4", err)
	}
	// A host without GPUs (no NVML): nothing to claim, nothing refused.
	dir = t.TempDir()
	for _, name := range []string{"model-a", "model-b"} {
		e := newEngine(t, w, load(t, w, fmt.Sprintf(serverRecipe, name, "", name)), dir, nil)
		if _, err := e.Apply(context.Background()); err != nil {
			t.Errorf("%s on a host without GPUs: %v", name, err)
		}
	}
}

// Two first applies from two state dirs at the same moment cannot both claim the GPUs:
// the check and a pending claim are one step under the claims folder's lock, so while the
// first run goes on (its server not yet gated) a second whole-node recipe is refused,
// naming the run in progress. A run that ends leaves no pending claim: once the first
// failed, the second passes; a pending claim no live run holds (a killed run's) is stale.
func TestGPUClaimsOfRunsStartingTogether(t *testing.T) {
	w := newWorld()
	w.started, w.release = make(chan string), make(chan struct{})
	host := &gpu.Facts{GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}}
	claims := t.TempDir()
	run := func(dir, name, extra string) error {
		text := fmt.Sprintf(serverRecipe, name, "", name)
		text = strings.Replace(text, "fake: {", "fake: {"+extra, 1)
		e := newEngine(t, w, load(t, w, text), dir, func(o *engine.Options) {
			o.Facts = host
			o.ClaimsDir = claims
		})
		_, err := e.Apply(context.Background())
		return err
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	doneA := make(chan error, 1)
	go func() { doneA <- run(dirA, "model-a", "wait: true, fail: true, ") }()
	<-w.started // A passed its check and runs; it has not passed yet
	err := run(dirB, "model-b", "")
	want := "recipe model-a, applied with state dir " + dirA + " (a run of it in progress), serves on GPU-0, GPU-1"
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), want) {
		t.Errorf("a second first apply while the first runs: %v, want exit 4 with %q", err, want)
	}
	close(w.release)
	if err := <-doneA; err == nil {
		t.Fatal("the failing run of model-a passed")
	}
	if left, _ := filepath.Glob(filepath.Join(claims, "*.pending")); len(left) != 0 {
		t.Errorf("pending claims left after the run ended: %v", left)
	}
	// A killed run's pending claim: the file is there, no process holds it.
	stale := filepath.Join(claims, "0123456789abcdef0123456789abcdef.json.pending")
	os.WriteFile(stale, []byte(`{"recipe": "model-c", "state_dir": "/nowhere", "gpus": ["GPU-0", "GPU-1"]}`), 0o644)
	if err := run(dirB, "model-b", ""); err != nil {
		t.Errorf("model-b once model-a's run failed and beside a stale pending claim: %v", err)
	}
}

// Many runs from as many state dirs, all starting at once, each wanting every GPU: exactly
// one passes the check; every other is refused (exit 4).
func TestGPUClaimsConcurrentClaimers(t *testing.T) {
	w := newWorld()
	w.started, w.release = make(chan string, 16), make(chan struct{})
	host := &gpu.Facts{GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0"}}}
	claims := t.TempDir()
	const n = 8
	errs := make(chan error, n)
	var ready sync.WaitGroup
	ready.Add(n)
	start := make(chan struct{})
	for i := range n {
		name := fmt.Sprintf("model-%d", i)
		e := newEngine(t, w, load(t, w, strings.Replace(fmt.Sprintf(serverRecipe, name, "", name), "fake: {", "fake: {wait: true, ", 1)), t.TempDir(), func(o *engine.Options) {
			o.Facts = host
			o.ClaimsDir = claims
		})
		go func() {
			ready.Done()
			<-start
			_, err := e.Apply(context.Background())
			errs <- err
		}()
	}
	ready.Wait()
	close(start)
	// The one run that passed the check reaches its step and waits there; every other
	// ends refused.
	started, refused := 0, 0
	for started+refused < n {
		select {
		case <-w.started:
			started++
		case err := <-errs:
			if !errors.Is(err, exitcode.ErrHost) {
				t.Fatalf("a run that lost: %v, want exit 4", err)
			}
			refused++
		}
	}
	if started != 1 {
		t.Fatalf("%d runs passed the check, want 1", started)
	}
	close(w.release)
	if err := <-errs; err != nil {
		t.Errorf("the run that claimed the GPU: %v", err)
	}
}

// The claims folder is read in full: a real claim behind 5,000 entries sglprov did not
// write (sorted before it) is still seen, and the second recipe refused; a folder of more
// entries than the bound is refused (exit 4), naming some of the junk, never read in part.
func TestGPUClaimsReadInFull(t *testing.T) {
	w := newWorld()
	host := &gpu.Facts{GPUs: []gpu.Device{{Index: 0, UUID: "GPU-0"}}}
	claims := t.TempDir()
	run := func(dir, name string) error {
		e := newEngine(t, w, load(t, w, fmt.Sprintf(serverRecipe, name, "", name)), dir, func(o *engine.Options) {
			o.Facts = host
			o.ClaimsDir = claims
		})
		_, err := e.Apply(context.Background())
		return err
	}
	junk := func(from, to int) {
		for i := from; i < to; i++ {
			if err := os.WriteFile(filepath.Join(claims, fmt.Sprintf("00000000-junk-%05d", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	if err := run(dirA, "model-a"); err != nil {
		t.Fatal(err)
	}
	junk(0, 5000)
	if err := run(dirB, "model-b"); !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "recipe model-a, applied with state dir "+dirA) {
		t.Fatalf("a claim behind 5,000 junk entries: %v, want exit 4 naming model-a", err)
	}
	junk(5000, 9000)
	err := run(dirB, "model-b")
	if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), "holds more than 8192 entries") || !strings.Contains(err.Error(), "00000000-junk-") {
		t.Fatalf("9,000 junk entries: %v, want exit 4 naming the junk", err)
	}
}
