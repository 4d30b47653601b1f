package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/ownership"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// fakeSpec is the body of a fake step: it records runs, can fail, sleep and keep outputs.
type fakeSpec struct {
	Fail bool `yaml:"fail"`
	// Converges makes the step an engine.Converger (like the packages step).
	Converges bool   `yaml:"converges"`
	Sleep     string `yaml:"sleep"`
	Input     string `yaml:"input"`
	Output    string `yaml:"output"`
	// Unit makes the step an engine.Owner of that unit (as the systemd step is).
	Unit string `yaml:"unit"`
	// Manager is the unit's service manager: under "exec" the step does not stop the
	// replaced recipes' units (engine.Replacer), as the systemd step does not.
	Manager string `yaml:"manager"`
	// NoSpace makes the step fail as a write to a full disk does (ENOSPC).
	NoSpace bool `yaml:"no_space"`
	// Wait makes the step say it started (world.started) and wait for world.release.
	Wait bool `yaml:"wait"`
	// Weights makes the step a download into that folder: it writes model.bin there and
	// owns it (as the download step owns the files it wrote).
	Weights string `yaml:"weights"`
	// Promotes makes the step report, as the smoke step's switch does once it promoted a
	// unit (gatedswitch.RunSwitch), that the unit of this run's generation now serves.
	Promotes bool `yaml:"promotes"`
	// Gate makes the step a gate (engine.Gate), as the smoke step is.
	Gate bool `yaml:"gate"`
}

// Gates implements engine.Gate.
func (f *fakeStep) Gates() bool { return f.spec.Gate }

// world is what the fake steps share in one test.
type world struct {
	mu       sync.Mutex
	ran      []string
	running  int32
	maxPar   int32
	broken   map[string]bool // outputs no longer intact
	external map[string]string
	started  chan string   // a step with wait: true sends its name once it runs
	release  chan struct{} // and waits until it is closed
}

type fakeStep struct {
	name string
	spec fakeSpec
	w    *world
}

func (f *fakeStep) Fingerprint(ctx context.Context, env *engine.Env) (map[string]string, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if v, ok := f.w.external[f.name]; ok {
		return map[string]string{"toolchain": v}, nil
	}
	return nil, nil
}

func (f *fakeStep) Converges() bool { return f.spec.Converges }

// GenerationKey gives the step's external input (a toolchain) to its generation's key,
// as the build step gives its nvcc version.
func (f *fakeStep) GenerationKey(context.Context, *engine.Env) (map[string]string, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if v, ok := f.w.external[f.name]; ok {
		return map[string]string{"toolchain": v}, nil
	}
	return nil, nil
}

func (f *fakeStep) Owns(*engine.Env) []engine.Owned {
	if f.spec.Weights != "" {
		// As the download step does: the folder's identity with the list.
		dev, ino := ownership.Identify(f.spec.Weights)
		return []engine.Owned{{Kind: engine.OwnedWeights, Path: f.spec.Weights, Files: []string{"model.bin"}, Listed: true, Dev: dev, Ino: ino}}
	}
	if f.spec.Unit == "" {
		return nil
	}
	return []engine.Owned{{Kind: engine.OwnedUnit, Path: f.spec.Unit, Manager: f.spec.Manager}}
}

// AppliesReplaces says whether the step stops the replaced recipes' units: a unit under
// any manager but exec, as the systemd step.
func (f *fakeStep) AppliesReplaces(env *engine.Env) bool {
	return f.spec.Unit != "" && f.spec.Manager != "exec" && len(env.Replaces) > 0
}

func (f *fakeStep) Intact(ctx context.Context, env *engine.Env) (bool, string, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.broken[f.name] {
		return false, "outputs changed: /out/" + f.name, nil
	}
	return true, "", nil
}

func (f *fakeStep) Run(ctx context.Context, env *engine.Env) error {
	n := atomic.AddInt32(&f.w.running, 1)
	defer atomic.AddInt32(&f.w.running, -1)
	for {
		m := atomic.LoadInt32(&f.w.maxPar)
		if n <= m || atomic.CompareAndSwapInt32(&f.w.maxPar, m, n) {
			break
		}
	}
	f.w.mu.Lock()
	f.w.ran = append(f.w.ran, f.name)
	delete(f.w.broken, f.name)
	f.w.mu.Unlock()
	if f.spec.Sleep != "" {
		d, _ := time.ParseDuration(f.spec.Sleep)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	env.Detail("ran", true)
	if f.spec.Wait {
		f.w.started <- f.name
		select {
		case <-f.w.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if out := f.spec.Output; strings.HasPrefix(out, os.TempDir()) {
		// An output in a test's folder is made, as a real step makes its tree.
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "made-by-"+f.name), []byte("0123456789"), 0o644); err != nil {
			return err
		}
	}
	if d := f.spec.Weights; d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "model.bin"), []byte("weights"), 0o644); err != nil {
			return err
		}
	}
	if f.spec.Promotes {
		if err := env.Promoted(); err != nil {
			return err
		}
	}
	if f.spec.NoSpace {
		return fmt.Errorf("writing %s: %w", f.spec.Output, syscall.ENOSPC)
	}
	if f.spec.Fail {
		return fmt.Errorf("fake failure in %s", f.name)
	}
	return nil
}

func registry(w *world) engine.Registry {
	return engine.Registry{"fake": {
		NewSpec: func() any { return &fakeSpec{} },
		New: func(name string, spec any) (engine.Step, error) {
			return &fakeStep{name: name, spec: *spec.(*fakeSpec), w: w}, nil
		},
	}}
}

func newWorld() *world {
	return &world{broken: map[string]bool{}, external: map[string]string{}}
}

func load(t testing.TB, w *world, text string, sets ...string) *recipe.Recipe {
	t.Helper()
	specs := recipe.KindSpecs{}
	for k, v := range registry(w) {
		specs[k] = v.NewSpec
	}
	r, err := recipe.Parse("test.yaml", []byte(text), specs, sets)
	if err != nil {
		t.Fatalf("parsing recipe: %v", err)
	}
	return r
}

func newEngine(t testing.TB, w *world, r *recipe.Recipe, dir string, mod func(*engine.Options)) *engine.Engine {
	t.Helper()
	o := engine.Options{Recipe: r, Registry: registry(w), StateDir: dir}
	if mod != nil {
		mod(&o)
	}
	e, err := engine.New(o)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	return e
}

func results(rep *engine.Report) map[string]string {
	out := map[string]string{}
	for _, s := range rep.Steps {
		out[s.Name] = s.Result
	}
	return out
}

const diamond = `
apiVersion: sglprov/v1
name: diamond
vars: {v: "1"}
steps:
  - name: src
    fake: {sleep: 30ms}
  - name: patch
    needs: [src]
    fake: {input: "{{ .vars.v }}"}
  - name: build
    needs: [patch]
    fake: {sleep: 30ms}
  - name: weights
    fake: {sleep: 60ms}
  - name: service
    needs: [build, weights]
    fake: {}
`

func TestApplyOrderAndConcurrency(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	rep, err := newEngine(t, w, load(t, w, diamond), dir, nil).Apply(context.Background())
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	pos := map[string]int{}
	for i, n := range w.ran {
		pos[n] = i
	}
	for _, edge := range [][2]string{{"src", "patch"}, {"patch", "build"}, {"build", "service"}, {"weights", "service"}} {
		if pos[edge[0]] > pos[edge[1]] {
			t.Errorf("%s ran after %s: order %v", edge[0], edge[1], w.ran)
		}
	}
	if w.maxPar < 2 {
		t.Errorf("independent steps did not run at the same time (max parallel %d)", w.maxPar)
	}
	if got := results(rep); got["service"] != engine.ResultOK || len(got) != 5 {
		t.Errorf("results = %v", got)
	}
	if _, err := os.Stat(filepath.Join(rep.Dir, "report.json")); err != nil {
		t.Errorf("no report: %v", err)
	}
	if st, err := os.Stat(filepath.Join(rep.Dir, "weights.log")); err != nil || st.IsDir() {
		t.Errorf("no step log: %v", err)
	}
}

func TestSkipReasons(t *testing.T) {
	tests := []struct {
		name   string
		change func(w *world) []string // returns --set values
		want   map[string]string       // step -> reason of the plan
	}{
		{
			name:   "nothing changed",
			change: func(w *world) []string { return nil },
			want:   map[string]string{"src": "unchanged", "patch": "unchanged", "build": "unchanged", "weights": "unchanged", "service": "unchanged"},
		},
		{
			name:   "var changed",
			change: func(w *world) []string { return []string{"v=2"} },
			want: map[string]string{"src": "unchanged", "patch": "fingerprint changed: vars.v", "build": "needs patch, which runs",
				"weights": "unchanged", "service": "needs build, which runs"},
		},
		{
			name:   "outputs changed",
			change: func(w *world) []string { w.broken["weights"] = true; return nil },
			want: map[string]string{"src": "unchanged", "patch": "unchanged", "build": "unchanged",
				"weights": "outputs changed: /out/weights", "service": "needs weights, which runs"},
		},
		{
			name:   "step input changed",
			change: func(w *world) []string { w.external["build"] = "nvcc 12.9"; return nil },
			want: map[string]string{"src": "unchanged", "patch": "unchanged", "build": "fingerprint changed: toolchain",
				"weights": "unchanged", "service": "needs build, which runs"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			dir := t.TempDir()
			if _, err := newEngine(t, w, load(t, w, diamond), dir, nil).Apply(context.Background()); err != nil {
				t.Fatal(err)
			}
			sets := tc.change(w)
			p, err := newEngine(t, w, load(t, w, diamond, sets...), dir, nil).Plan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, s := range p.Steps {
				got[s.Name] = s.Reason
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("plan reasons (-want +got):\n%s", d)
			}
			// Apply agrees: what the plan skips does not run.
			w.ran = nil
			if _, err := newEngine(t, w, load(t, w, diamond, sets...), dir, nil).Apply(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, n := range w.ran {
				if got[n] == "unchanged" {
					t.Errorf("%s ran although the plan said unchanged", n)
				}
			}
		})
	}
}

func TestFailureStopsDependentsNotSiblings(t *testing.T) {
	w := newWorld()
	text := strings.Replace(diamond, "    fake: {input: \"{{ .vars.v }}\"}", "    fake: {fail: true}", 1)
	rep, err := newEngine(t, w, load(t, w, text), t.TempDir(), nil).Apply(context.Background())
	if err == nil || !strings.Contains(err.Error(), "step patch: fake failure in patch") {
		t.Fatalf("Apply error = %v", err)
	}
	if exitcode.Of(err) != exitcode.ExitFailed {
		t.Errorf("exit code %d, want 1", exitcode.Of(err))
	}
	want := map[string]string{"src": "ok", "patch": "failed", "build": "blocked", "weights": "ok", "service": "blocked"}
	if d := cmp.Diff(want, results(rep)); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	// The next run retries the failed step and what it blocked, not what succeeded.
	w2 := newWorld()
	p, _ := newEngine(t, w2, load(t, w2, diamond), rep.Dir+"/../..", nil).Plan(context.Background())
	for _, s := range p.Steps {
		if s.Name == "patch" && (!s.Run || s.Reason != "last run failed") {
			t.Errorf("patch after failure: run=%v reason=%q", s.Run, s.Reason)
		}
		if s.Name == "weights" && s.Run {
			t.Errorf("weights re-runs after an independent failure: %q", s.Reason)
		}
	}
}

func TestOnlyAndForce(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	r := load(t, w, diamond)
	if _, err := newEngine(t, w, r, dir, nil).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.ran = nil
	rep, err := newEngine(t, w, r, dir, func(o *engine.Options) { o.Only = []string{"build"}; o.Force = []string{"build"} }).Apply(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"build"}, w.ran); d != "" {
		t.Errorf("ran (-want +got):\n%s", d)
	}
	if got := results(rep)["src"]; got != engine.ResultNotSelected {
		t.Errorf("src result %q", got)
	}
	if _, err := engine.New(engine.Options{Recipe: r, Registry: registry(w), StateDir: dir, Only: []string{"nope"}}); !errors.Is(err, exitcode.ErrUsage) {
		t.Errorf("unknown --only step: %v", err)
	}
}

func TestInterruptRecordsAndConverges(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	text := strings.Replace(diamond, "fake: {sleep: 60ms}", "fake: {sleep: 10s}", 1)
	ctx, cancel := context.WithCancel(context.Background())
	// Interrupted once build is done and recorded, while weights still sleeps: waiting on
	// the record, not on a time, keeps a loaded machine from cutting build short too.
	go func() {
		defer cancel()
		for deadline := time.Now().Add(9 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if st, err := engine.LoadState(dir); err == nil && st.Steps["build"] != nil && st.Steps["build"].Result == engine.ResultOK {
				return
			}
		}
	}()
	rep, err := newEngine(t, w, load(t, w, text), dir, nil).Apply(ctx)
	if err == nil {
		t.Fatal("interrupted apply returned no error")
	}
	if got := results(rep)["weights"]; got != engine.ResultInterrupted {
		t.Errorf("weights = %q, want interrupted", got)
	}
	// The error's last line says what happened: the step was cut short, it did not fail.
	lines := strings.Split(err.Error(), "\n")
	if last := lines[len(lines)-1]; last != "step weights interrupted" {
		t.Errorf("last line of the error = %q, want %q", last, "step weights interrupted")
	}
	st, _ := engine.LoadState(dir)
	if st.Steps["weights"].Result != engine.ResultInterrupted {
		t.Errorf("state weights = %q", st.Steps["weights"].Result)
	}
	w.ran = nil
	if _, err := newEngine(t, w, load(t, w, diamond), dir, nil).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	sort.Strings(w.ran)
	if !contains(w.ran, "weights") || !contains(w.ran, "service") || contains(w.ran, "src") {
		t.Errorf("after interrupt, ran %v", w.ran)
	}
}

func TestLockContention(t *testing.T) {
	dir := t.TempDir()
	l, err := engine.AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.AcquireLock(dir)
	if !errors.Is(err, exitcode.ErrLocked) || exitcode.Of(err) != 5 {
		t.Fatalf("second lock: %v", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("lock error does not name the holder: %v", err)
	}
	l.Release()
	l2, err := engine.AcquireLock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}

func TestStateWriteIsAtomic(t *testing.T) {
	dir := t.TempDir()
	st := &engine.State{Steps: map[string]*engine.StepRecord{"a": {Result: "ok"}}}
	if err := st.Save(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "state.json" {
		t.Errorf("state dir holds %v, want only state.json", entries)
	}
	if err := os.WriteFile(engine.StatePath(dir), []byte("{broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.LoadState(dir); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("corrupt state: %v", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// BenchmarkNoopReapply measures a re-run of a 7-step recipe whose steps are all intact:
// the tool's own overhead (state, fingerprints, report, logs).
func BenchmarkNoopReapply(b *testing.B) {
	w := newWorld()
	text := `
apiVersion: sglprov/v1
name: seven
vars: {a: x, b: y}
steps:
  - {name: s1, fake: {input: "{{ .vars.a }}"}}
  - {name: s2, needs: [s1], fake: {}}
  - {name: s3, needs: [s2], fake: {input: "{{ .vars.b }}"}}
  - {name: s4, fake: {}}
  - {name: s5, needs: [s3, s4], fake: {}}
  - {name: s6, needs: [s5], fake: {}}
  - {name: s7, needs: [s6], fake: {}}
`
	dir := b.TempDir()
	r := load(b, w, text)
	if _, err := newEngine(b, w, r, dir, nil).Apply(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := newEngine(b, w, r, dir, nil).Apply(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range rep.Steps {
			if s.Result != engine.ResultSkipped {
				b.Fatalf("%s: %s", s.Name, s.Result)
			}
		}
	}
}

func TestRunFoldersArePruned(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	r := load(t, w, diamond)
	var last string
	for i := 0; i < engine.KeepRuns+5; i++ {
		rep, err := newEngine(t, w, r, dir, nil).Apply(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		last = rep.Dir
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "runs"))
	if len(entries) != engine.KeepRuns {
		t.Errorf("%d run folders, want %d", len(entries), engine.KeepRuns)
	}
	rep, err := engine.LatestReport(dir)
	if err != nil || rep.Dir != last {
		t.Errorf("latest report %v, %v; want the last run %s", rep, err, last)
	}
}

// A step that converges (installs packages) runs again when its outputs changed, and the
// steps that need it do not run for its sake, in plan and in apply.
func TestConvergingStepDoesNotRerunDependents(t *testing.T) {
	const text = `apiVersion: sglprov/v1
name: converge
steps:
  - name: pkgs
    fake: {converges: true}
  - name: src
    needs: [pkgs]
    fake: {}
  - name: build
    needs: [src]
    fake: {}
`
	w := newWorld()
	dir := t.TempDir()
	if _, err := newEngine(t, w, load(t, w, text), dir, nil).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.broken["pkgs"] = true // a package was removed
	p, err := newEngine(t, w, load(t, w, text), dir, nil).Plan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range p.Steps {
		got[s.Name] = s.Reason
	}
	want := map[string]string{"pkgs": "outputs changed: /out/pkgs", "src": "unchanged", "build": "unchanged"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plan reasons (-want +got):\n%s", d)
	}
	w.ran = nil
	if _, err := newEngine(t, w, load(t, w, text), dir, nil).Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"pkgs"}, w.ran); d != "" {
		t.Errorf("steps that ran (-want +got):\n%s", d)
	}
}

// A plan cut short by Ctrl-C is not a plan: it says so with exit 130 (SIGTERM: 1), where it
// exited 0 with the interrupted steps' reasons in its table.
func TestPlanInterrupted(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	for _, tc := range []struct {
		cause error
		want  int
	}{
		{fmt.Errorf("stopped by SIGINT: %w", exitcode.ErrInterrupted), exitcode.ExitInterrupted},
		{errors.New("stopped by SIGTERM"), exitcode.ExitFailed},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tc.cause)
		p, err := newEngine(t, w, load(t, w, diamond), dir, nil).Plan(ctx)
		if p == nil || exitcode.Of(err) != tc.want || !strings.Contains(err.Error(), tc.cause.Error()) {
			t.Errorf("Plan after %q = %v, %v; want the plan and exit %d", tc.cause, p, err, tc.want)
		}
	}
}

// Env.Path is the one rule for the host paths step fields name: absolute ones go under
// --root, relative ones (and "") are made absolute against the recipe's folder, never the
// working directory.
func TestEnvPath(t *testing.T) {
	for _, tc := range []struct {
		root, p, want string
	}{
		{"", "/opt/sglang", "/opt/sglang"},
		{"/", "/opt/sglang", "/opt/sglang"},
		{"/mnt/img", "/opt/sglang", "/mnt/img/opt/sglang"},
		{"", "tree", "/etc/sglprov/tree"},
		{"/mnt/img", "models/q", "/etc/sglprov/models/q"},
		{"", "../shared/w", "/etc/shared/w"},
		{"", "", "/etc/sglprov"},
	} {
		env := &engine.Env{Root: tc.root, RecipeDir: "/etc/sglprov"}
		if got := env.Path(tc.p); got != tc.want {
			t.Errorf("root %q: Path(%q) = %q, want %q", tc.root, tc.p, got, tc.want)
		}
	}
}
