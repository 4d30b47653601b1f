package smoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	gatepkg "github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/pkg/switchover/fakeunits"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// fakeService is a ServiceStep whose "unit" is an httptest server: activating a profile
// swaps the server's behaviour to that profile's fakesglang mode.
type fakeService struct {
	srv      *httptest.Server
	handler  atomic.Pointer[http.Handler]
	modes    map[string]fakesglang.Mode
	order    []string
	failedIn map[string]bool // profiles whose unit fails (Failed reports true)

	mu        sync.Mutex
	active    string
	activated []string
	won       []string
	restored  int
	lkg       bool
	// served and path, when set, are the names the fake units serve under.
	served, path string
	dir          string
	units        *fakeunits.Manager
}

func newFakeService(t *testing.T, order []string, modes map[string]fakesglang.Mode) *fakeService {
	t.Helper()
	f := &fakeService{modes: modes, order: order, failedIn: map[string]bool{}, dir: t.TempDir(), lkg: true}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*f.handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	f.setActive(order[0])
	return f
}

func (f *fakeService) setActive(p string) {
	f.mu.Lock()
	f.active = p
	f.mu.Unlock()
	var h http.Handler = fakesglang.New(fakesglang.Options{Mode: f.modes[p], Model: "qwen"})
	f.handler.Store(&h)
}

func (f *fakeService) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (f *fakeService) Intact(context.Context, *engine.Env) (bool, string, error) {
	return true, "", nil
}
func (f *fakeService) Run(context.Context, *engine.Env) error { return nil }
func (f *fakeService) ServiceName() string                    { return "sglang-qwen.service" }
func (f *fakeService) Candidates(*engine.Env) []string        { return f.order }
func (f *fakeService) Active(*engine.Env) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active
}

// Restart restarts the unit that serves, as the systemd step does.
func (f *fakeService) Restart(ctx context.Context, _ *engine.Env) error {
	f.mu.Lock()
	u := f.units
	f.mu.Unlock()
	if u == nil {
		return errors.New("nothing installed")
	}
	return switchover.RestartServing(ctx, u, f.dir, f.ServiceName())
}
func (f *fakeService) Failed(context.Context) (bool, string, error) {
	if f.failedIn[f.Active(nil)] {
		return true, "sglang-qwen.service: Failed with result 'exit-code'.", nil
	}
	return false, "", nil
}

// unitOf is the fake unit of profile p: its server lists "qwen" and loaded "default", as
// the fakesglang handler says.
func (f *fakeService) unitOf(p string) []byte {
	served, path := "qwen", "default"
	if f.served != "" {
		served, path = f.served, f.path
	}
	return fmt.Appendf(nil, "[Service]\nExecStart=/bin/fake --model-path %s --served-model-name %s --profile %s\n", path, served, p)
}

// Switch hands out a switch over a fake of systemd's units whose server, when started,
// answers as its profile's fakesglang mode.
func (f *fakeService) Switch(_ context.Context, env *engine.Env, profiles []string) (*switchover.Switch, error) {
	f.mu.Lock()
	if f.units == nil {
		f.units = fakeunits.New(f.dir)
		if f.lkg {
			_, _ = f.units.Install(context.Background(), f.ServiceName(), f.unitOf(f.active))
			_ = f.units.Start(context.Background(), f.ServiceName())
		}
		f.units.OnStart = func(_ string, content []byte) {
			_, p, _ := strings.Cut(string(content), "--profile ")
			p = strings.TrimSpace(p)
			f.mu.Lock()
			f.activated = append(f.activated, p)
			f.mu.Unlock()
			f.setActive(p)
		}
	}
	f.mu.Unlock()
	var cands []switchover.Candidate
	for _, p := range profiles {
		c := switchover.Candidate{Profile: p, Content: f.unitOf(p)}
		if _, ok := f.modes[p]; !ok {
			c.Err = errors.New("unknown profile")
		}
		cands = append(cands, c)
	}
	// The fake's server answers at one URL whatever its unit's port: it is switched on
	// the served port (switchover's own tests cover the side port).
	return &switchover.Switch{Manager: f.units, StateDir: f.dir, Unit: f.ServiceName(), Candidates: cands,
		Stage:  switchover.StageServed,
		Before: func(context.Context, switchover.Candidate) error { return nil }}, nil
}

func (f *fakeService) Switched(_ context.Context, _ *engine.Env, res *switchover.Result) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if res.Winner != nil {
		f.won = append(f.won, res.WinnerProfile)
	}
	if res.Restored {
		f.restored++
	}
	return nil
}

var _ engine.ServiceStep = (*fakeService)(nil)

func testSpec(url string) Spec {
	return Spec{URL: url, ReadyTimeout: "20s", RequestTimeout: "2s", MaxTokens: 200, Cases: gatepkg.BuiltinCases()}
}

func newEnv(t *testing.T, deps map[string]engine.Step) (*engine.Env, *bytes.Buffer) {
	var out bytes.Buffer
	env := engine.NewTestEnv(t.TempDir(), &out)
	env.StepName = "smoke"
	for k, v := range deps {
		env.Deps[k] = v
	}
	return env, &out
}

func TestProfileFallback(t *testing.T) {
	tests := []struct {
		name          string
		order         []string
		modes         map[string]fakesglang.Mode
		failedIn      []string
		first         bool     // a first install: no unit passed before
		wantErr       []string // substrings; nil: pass
		wantActivated []string
		wantWon       []string
		wantRestored  int
	}{
		{
			name:          "active profile passes",
			order:         []string{"cudnn", "cutlass"},
			modes:         map[string]fakesglang.Mode{"cudnn": fakesglang.ModeGood, "cutlass": fakesglang.ModeGood},
			wantActivated: nil,
			wantWon:       []string{"cudnn"},
		},
		{
			name:          "first broken, second wins",
			order:         []string{"cudnn", "cutlass"},
			modes:         map[string]fakesglang.Mode{"cudnn": fakesglang.ModeBang, "cutlass": fakesglang.ModeGood},
			wantActivated: []string{"cutlass"},
			wantWon:       []string{"cutlass"},
		},
		{
			name:  "all broken, last-known-good restored",
			order: []string{"cudnn", "cutlass", "triton"},
			modes: map[string]fakesglang.Mode{"cudnn": fakesglang.ModeBang, "cutlass": fakesglang.ModeNaN,
				"triton": fakesglang.ModeCommaBang},
			wantErr: []string{"no candidate profile passed the gate; the last-known-good unit was restored and failed the gate too",
				"cudnn: FAIL: 0/3 cases passed: arithmetic: degenerate reasoning_content (punct-run)",
				`cutlass: FAIL: 0/3 cases passed: arithmetic: matched_stop "NaN happened"`,
				"triton: FAIL"},
			wantActivated: []string{"cutlass", "triton", "cudnn"},
			wantRestored:  1,
		},
		{
			name:          "all broken, nothing to restore",
			order:         []string{"cudnn"},
			modes:         map[string]fakesglang.Mode{"cudnn": fakesglang.ModePlus},
			first:         true,
			wantErr:       []string{"there is no last-known-good unit to restore", "cudnn: FAIL"},
			wantRestored:  0,
			wantActivated: []string{"cudnn"},
		},
		{
			name:          "failed unit ends the wait, next profile wins",
			order:         []string{"cudnn", "cutlass"},
			modes:         map[string]fakesglang.Mode{"cudnn": fakesglang.ModeNeverReady, "cutlass": fakesglang.ModeGood},
			failedIn:      []string{"cudnn"},
			wantActivated: []string{"cutlass"},
			wantWon:       []string{"cutlass"},
		},
		{
			name:          "profile that cannot be activated is skipped",
			order:         []string{"cudnn", "missing", "cutlass"},
			modes:         map[string]fakesglang.Mode{"cudnn": fakesglang.ModeApostropheS, "cutlass": fakesglang.ModeGood},
			wantActivated: []string{"cutlass"},
			wantWon:       []string{"cutlass"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := newFakeService(t, tt.order, tt.modes)
			svc.lkg = !tt.first
			for _, p := range tt.failedIn {
				svc.failedIn[p] = true
			}
			step, err := New("smoke", testSpec(svc.srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			env, out := newEnv(t, map[string]engine.Step{"sglang-service": svc})
			start := time.Now()
			err = step.Run(context.Background(), env)
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("gate took %s (ready timeout is 20s: a failed unit must end the wait)", el)
			}
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Run: %v\n%s", err, out)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, exitcode.ErrGate) {
					t.Fatalf("Run error %v, want ErrGate", err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				if exitcode.Of(err) != exitcode.ExitGate {
					t.Errorf("exit code %d", exitcode.Of(err))
				}
			}
			if strings.Join(svc.activated, ",") != strings.Join(tt.wantActivated, ",") {
				t.Errorf("activated %v, want %v", svc.activated, tt.wantActivated)
			}
			if strings.Join(svc.won, ",") != strings.Join(tt.wantWon, ",") {
				t.Errorf("won %v, want %v", svc.won, tt.wantWon)
			}
			if svc.restored != tt.wantRestored {
				t.Errorf("restored %d times, want %d", svc.restored, tt.wantRestored)
			}
			if !strings.Contains(out.String(), "CASE") {
				t.Errorf("no verdict table in the step output:\n%s", out)
			}
		})
	}
}

func TestFailedUnitMessage(t *testing.T) {
	svc := newFakeService(t, []string{"cudnn"}, map[string]fakesglang.Mode{"cudnn": fakesglang.ModeNeverReady})
	svc.failedIn["cudnn"] = true
	step, err := New("smoke", testSpec(svc.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	env, _ := newEnv(t, map[string]engine.Step{"svc": svc})
	err = step.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), "Failed with result 'exit-code'") {
		t.Errorf("error %v, want the unit's last lines", err)
	}
}

func TestGateWithoutService(t *testing.T) {
	for _, tt := range []struct {
		mode fakesglang.Mode
		pass bool
	}{{fakesglang.ModeGood, true}, {fakesglang.ModeBang, false}} {
		t.Run(string(tt.mode), func(t *testing.T) {
			srv := httptest.NewServer(fakesglang.New(fakesglang.Options{Mode: tt.mode}))
			defer srv.Close()
			step, err := New("smoke", testSpec(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			env, out := newEnv(t, map[string]engine.Step{"other": step})
			err = step.Run(context.Background(), env)
			if tt.pass != (err == nil) {
				t.Fatalf("Run: %v\n%s", err, out)
			}
			if !tt.pass && !errors.Is(err, exitcode.ErrGate) {
				t.Errorf("error %v, want ErrGate", err)
			}
			if !strings.Contains(out.String(), "smoke: ") {
				t.Errorf("no verdict line:\n%s", out)
			}
		})
	}
}

func TestKind(t *testing.T) {
	k := Kind()
	if _, ok := k.NewSpec().(*Spec); !ok {
		t.Fatal("NewSpec is not *Spec")
	}
	tests := []struct {
		name string
		spec any
		want string
	}{
		{"ok", &Spec{URL: "http://127.0.0.1:30000", ReadyTimeout: "20m"}, ""},
		{"bad duration", &Spec{URL: "http://h:1", ReadyTimeout: "twenty minutes"}, `ready_timeout "twenty minutes"`},
		{"negative duration", &Spec{URL: "http://h:1", RequestTimeout: "-1s"}, "request_timeout"},
		{"bad cases_timeout", &Spec{URL: "http://h:1", CasesTimeout: "0s"}, `cases_timeout "0s": want a positive duration`},
		{"no url", &Spec{}, "url is required"},
		{"bad regex", &Spec{URL: "http://h:1", Cases: []gateCase{{Name: "x", Prompt: "p", Expect: gateExpect{Regex: "("}}}}, "expect.regex"},
		{"wrong type", Spec{}, "want *gatespec.Spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := k.New("smoke", tt.spec)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if ar, ok := st.(engine.AlwaysRunner); !ok || !ar.AlwaysRun() {
					t.Error("smoke step does not always run")
				}
				ok, reason, _ := st.Intact(context.Background(), nil)
				if ok || reason == "" {
					t.Errorf("Intact = %v %q", ok, reason)
				}
				fp1, _ := st.Fingerprint(context.Background(), nil)
				fp2, _ := st.Fingerprint(context.Background(), nil)
				if fp1["spec"] == "" || fp1["spec"] != fp2["spec"] {
					t.Errorf("fingerprint %v / %v", fp1, fp2)
				}
				return
			}
			if err == nil || !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want ErrUsage with %q", err, tt.want)
			}
		})
	}
}

func TestAPIKeyFromEnv(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		fakesglang.New(fakesglang.Options{}).ServeHTTP(w, r)
	}))
	defer srv.Close()
	spec := testSpec(srv.URL)
	spec.APIKeyEnv = "SGLANG_API_KEY"
	step, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	step.getenv = func(k string) string {
		if k == "SGLANG_API_KEY" {
			return "sk-hidden"
		}
		return ""
	}
	env, out := newEnv(t, nil)
	if err := step.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if got.Load() != "Bearer sk-hidden" {
		t.Errorf("authorization %v", got.Load())
	}
	if strings.Contains(out.String(), "sk-hidden") {
		t.Error("API key in the step output")
	}
}

type (
	gateCase   = gatepkg.Case
	gateExpect = gatepkg.Expect
)

func TestOfflineDoesNotGate(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	step, err := New("smoke", testSpec(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	env, out := newEnv(t, nil)
	env.Offline = true
	var skip *engine.SkipError
	if err := step.Run(context.Background(), env); !errors.As(err, &skip) || !strings.Contains(skip.Reason, "--root") {
		t.Fatalf("offline gate: %v, want a skip naming --root", err)
	}
	if hits.Load() != 0 {
		t.Errorf("offline gate asked the server %d times; output:\n%s", hits.Load(), out)
	}
}

// TestCasesTimeoutPerProfile: against servers that never answer chat, each profile costs
// cases_timeout once, not request_timeout for every request of every case.
func TestCasesTimeoutPerProfile(t *testing.T) {
	svc := newFakeService(t, []string{"a", "b"},
		map[string]fakesglang.Mode{"a": fakesglang.ModeHang, "b": fakesglang.ModeHang})
	spec := testSpec(svc.srv.URL)
	spec.RequestTimeout, spec.CasesTimeout = "10s", "300ms"
	spec.Cases = gatepkg.BuiltinSet()
	step, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	env, out := newEnv(t, map[string]engine.Step{"sglang-service": svc})
	start := time.Now()
	err = step.Run(context.Background(), env)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("two hanging profiles took %s", el)
	}
	if !errors.Is(err, exitcode.ErrGate) {
		t.Fatalf("Run: %v", err)
	}
	for _, want := range []string{"arithmetic: no answer before the cases' time budget (cases_timeout 300ms) was spent",
		"fact: not run: the cases' time budget (cases_timeout 300ms) was spent", fmt.Sprintf("b: FAIL: 0/%d cases passed", len(spec.Cases))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v\n%s", want, err, out)
		}
	}
}

// TestLoadCaseRejectsCrowdedProfile: a profile that answers every sequential case right
// and garbage under load is rejected for its load case; the next profile wins.
func TestLoadCaseRejectsCrowdedProfile(t *testing.T) {
	svc := newFakeService(t, []string{"cutlass", "cudnn"},
		map[string]fakesglang.Mode{"cutlass": fakesglang.ModeCrowded, "cudnn": fakesglang.ModeGood})
	spec := testSpec(svc.srv.URL)
	spec.RequestTimeout = "10s"
	spec.Cases = append(gatepkg.BuiltinCases(), gateCase{Name: "load", Prompt: "What is 17 * 23? Answer with the number only.",
		Concurrency: 64, Expect: gateExpect{Regex: `\b391\b`}})
	step, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	env, out := newEnv(t, map[string]engine.Step{"sglang-service": svc})
	if err := step.Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v\n%s", err, out)
	}
	if strings.Join(svc.activated, ",") != "cudnn" || strings.Join(svc.won, ",") != "cudnn" {
		t.Errorf("activated %v won %v", svc.activated, svc.won)
	}
	table := out.String()
	for _, want := range []string{"profile cutlass", "arithmetic  chat  PASS", "load        load  FAIL     64 (",
		"of 64 answers failed; first: degenerate content (punct-run)", "profile cudnn", "smoke: PASS: 4/4"} {
		if !strings.Contains(table, want) {
			t.Errorf("output lacks %q:\n%s", want, table)
		}
	}
}

// TestQuestionFileBesideRecipe: an accuracy case's JSONL file is read relative to the
// recipe's folder, and refused when others can write it.
func TestQuestionFileBesideRecipe(t *testing.T) {
	srv := httptest.NewServer(fakesglang.New(fakesglang.Options{Model: "qwen"}))
	defer srv.Close()
	spec := testSpec(srv.URL)
	spec.Cases = []gateCase{{Name: "own", Accuracy: &gatepkg.Accuracy{Questions: "q.jsonl"}}}
	step, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	env, out := newEnv(t, nil)
	env.RecipeDir = t.TempDir()
	p := filepath.Join(env.RecipeDir, "q.jsonl")
	if err := os.WriteFile(p, []byte(`{"prompt": "What is 6 * 7?", "answer": 42}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := step.Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "score 1.00 (1/1 right)") {
		t.Errorf("output:\n%s", out)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	err = step.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("group-writable file: %v", err)
	}
}

// TestShippedRecipesUseEveryKind: the SM120 recipe's gate (and the demo's) has a load, a
// tool-call, a reasoning and an accuracy case, and they validate.
func TestShippedRecipesUseEveryKind(t *testing.T) {
	for _, file := range []string{"qwen3.5-397b-a17b-nvfp4-sm120.yaml", "demo.yaml"} {
		t.Run(file, func(t *testing.T) {
			r, err := recipe.Load(filepath.Join("..", "..", "..", "recipes", file),
				recipe.KindSpecs{"smoke": func() any { return new(Spec) }, "source": func() any { return new(map[string]any) },
					"patch": func() any { return new(map[string]any) }, "build": func() any { return new(map[string]any) },
					"download": func() any { return new(map[string]any) }, "systemd": func() any { return new(map[string]any) },
					"command": func() any { return new(map[string]any) }, "packages": func() any { return new(map[string]any) },
					"allreduce": func() any { return new(map[string]any) }}, nil)
			if err != nil {
				t.Fatal(err)
			}
			st := r.Step("smoke")
			data, err := r.NewData(nil)
			if err != nil {
				t.Fatal(err)
			}
			var spec Spec
			if err := st.Render(data, &spec); err != nil {
				t.Fatal(err)
			}
			if _, err := New("smoke", spec); err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, k := range spec.Cases {
				kinds[k.Kind()] = true
			}
			for _, k := range []string{gatepkg.KindLoad, gatepkg.KindTool, gatepkg.KindReasoning, gatepkg.KindAccuracy} {
				if !kinds[k] {
					t.Errorf("no %s case in %s", k, file)
				}
			}
		})
	}
}
