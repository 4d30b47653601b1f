package systemd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/switchover"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/service")

const repo = "../../.."

// recipeProfiles are the profiles of the Qwen3.5 NVFP4 recipe, plus a Hopper one.
func recipeProfiles() map[string]recipe.Profile {
	return map[string]recipe.Profile{
		"sm120-fp4-cudnn": {
			Match: recipe.ProfileMatch{ComputeCapability: "12.0", Quantization: "modelopt_fp4"},
			Args: []string{"--attention-backend", "triton", "--moe-runner-backend", "flashinfer_cutlass",
				"--fp4-gemm-backend", "flashinfer_cudnn"},
			Env: map[string]string{"SGLANG_DISABLE_DEEP_GEMM": "1"},
		},
		"sm120-fp4-cutlass": {
			Match: recipe.ProfileMatch{ComputeCapability: "12.0", Quantization: "modelopt_fp4"},
			Args: []string{"--attention-backend", "triton", "--moe-runner-backend", "flashinfer_cutlass",
				"--fp4-gemm-backend", "flashinfer_cutlass"},
		},
		"hopper-fp4": {
			Match: recipe.ProfileMatch{ComputeCapability: ">=9.0,<10.0", Quantization: "modelopt_fp4"},
			Args:  []string{"--attention-backend", "fa3"},
		},
		"any-fp8": {
			Match: recipe.ProfileMatch{Quantization: "fp8"},
		},
	}
}

// noNeeds is a needs_commands that checks nothing, for the tests whose server is a fake
// that execs no compiler.
func noNeeds() *[]string { return &[]string{} }

// qwenSpec is the recipe's sglang-service step, with a server that execs nothing.
func qwenSpec() Spec {
	return Spec{
		NeedsCommands: noNeeds(),
		Unit:          "sglang-qwen.service",
		Profiles:      []string{"sm120-fp4-cudnn", "sm120-fp4-cutlass"},
		ModelPath:     "/var/lib/sglprov/models/Qwen3.5-397B-A17B-NVFP4",
		Args: []string{"--quantization", "modelopt_fp4", "--reasoning-parser", "qwen3",
			"--tool-call-parser", "qwen3_coder"},
	}
}

func facts(t *testing.T, fixture string) *gpu.Facts {
	t.Helper()
	f, err := gpu.LoadFixture(filepath.Join(repo, "testdata/gpu", fixture))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func testEnv(t *testing.T, fixture string) *engine.Env {
	t.Helper()
	env := engine.NewTestEnv(t.TempDir(), nil)
	env.RecipeName = "qwen3.5-397b-a17b-nvfp4-sm120"
	env.RecipeDir = t.TempDir()
	switch fixture {
	case "":
	case "zero":
		env.Facts = &gpu.Facts{DriverVersion: "580.95.05"}
	default:
		env.Facts = facts(t, fixture)
	}
	env.Profiles = recipeProfiles()
	return env
}

func newStep(t *testing.T, spec Spec) *Step {
	t.Helper()
	s, err := New("test", spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fakeManager installs units into a folder and records what it is asked to do.
type fakeManager struct {
	dir string
	// kind is what Kind reports ("fake" when empty).
	kind string
	mu   sync.Mutex
	ops  []string
	// state is what State reports.
	state string
	// restartErr fails Restart for the named unit content marker.
	failRestart string
}

func (f *fakeManager) op(s string) {
	f.mu.Lock()
	f.ops = append(f.ops, s)
	f.mu.Unlock()
}

func (f *fakeManager) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.ops
	f.ops = nil
	return o
}

func (f *fakeManager) Kind() string {
	if f.kind == "" {
		return "fake"
	}
	return f.kind
}
func (f *fakeManager) UnitPath(unit string) string { return filepath.Join(f.dir, unit) }
func (f *fakeManager) Install(_ context.Context, unit string, content []byte) (bool, error) {
	changed, err := atomicfile.WriteIfChanged(f.UnitPath(unit), content, 0o644)
	f.op(fmt.Sprintf("install changed=%v", changed))
	return changed, err
}
func (f *fakeManager) Start(context.Context, string) error {
	f.op("start")
	f.state = "active"
	return nil
}
func (f *fakeManager) Restart(_ context.Context, unit string) error {
	f.op("restart")
	if f.failRestart != "" {
		b, _ := os.ReadFile(f.UnitPath(unit))
		if bytes.Contains(b, []byte(f.failRestart)) {
			f.state = "failed"
			return errors.New("job failed")
		}
	}
	f.state = "active"
	return nil
}
func (f *fakeManager) Stop(context.Context, string) error {
	f.op("stop")
	f.state = "inactive"
	return nil
}
func (f *fakeManager) State(context.Context, string) (string, string, error) {
	if f.state == "" {
		return "inactive", "dead", nil
	}
	return f.state, "", nil
}
func (f *fakeManager) Failed(context.Context, string) (bool, string, error) {
	return f.state == "failed", "last lines", nil
}
func (f *fakeManager) Close() error { return nil }

func withFake(t *testing.T, env *engine.Env) *fakeManager {
	t.Helper()
	fm := &fakeManager{dir: t.TempDir()}
	env.NewManager = func(context.Context, service.Options) (service.Manager, error) { return fm, nil }
	return fm
}

func TestGoldenSM120(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	s := newStep(t, qwenSpec())
	p, err := s.pick(env)
	if err != nil {
		t.Fatal(err)
	}
	if p != "sm120-fp4-cudnn" {
		t.Fatalf("first candidate %q", p)
	}
	unit, err := s.render(env, p)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join(repo, "testdata/service/sglang-qwen.service")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, unit, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), string(unit)); diff != "" {
		t.Errorf("unit differs from %s (-want +got; go test -update rewrites it):\n%s", golden, diff)
	}
	svc, err := service.ReadService(s.spec.Unit, unit, "/var/cache")
	if err != nil {
		t.Fatal(err)
	}
	wantArgv := []string{"/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server",
		"--model-path", "/var/lib/sglprov/models/Qwen3.5-397B-A17B-NVFP4", "--host", "127.0.0.1", "--port", "30000", "--tp", "8",
		"--attention-backend", "triton", "--moe-runner-backend", "flashinfer_cutlass", "--fp4-gemm-backend", "flashinfer_cudnn",
		"--quantization", "modelopt_fp4", "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder"}
	if diff := cmp.Diff(wantArgv, svc.Argv); diff != "" {
		t.Errorf("ExecStart read back (-want +got):\n%s", diff)
	}
	if svc.Env["SGLANG_DISABLE_DEEP_GEMM"] != "1" {
		t.Errorf("profile env missing: %v", svc.Env)
	}
}

func TestMatching(t *testing.T) {
	tests := []struct {
		name     string
		fixture  string
		profiles []string
		args     []string
		want     []string
		wantErr  error
		mention  []string
	}{
		{name: "SM120 host gets the SM120 profiles", fixture: "rtx-pro-6000-x8.json",
			profiles: []string{"sm120-fp4-cudnn", "hopper-fp4", "sm120-fp4-cutlass"},
			want:     []string{"sm120-fp4-cudnn", "sm120-fp4-cutlass"}},
		{name: "Hopper host gets only the Hopper profile", fixture: "h100-x8.json",
			profiles: []string{"sm120-fp4-cudnn", "hopper-fp4", "sm120-fp4-cutlass"},
			want:     []string{"hopper-fp4"}},
		{name: "Hopper host with Blackwell profiles", fixture: "h100-x8.json",
			profiles: []string{"sm120-fp4-cudnn", "sm120-fp4-cutlass"},
			wantErr:  exitcode.ErrHost, mention: []string{"9.0", "sm120-fp4-cudnn", "sm120-fp4-cutlass", "needs compute capability 12.0"}},
		{name: "quantization decides", fixture: "rtx-pro-6000-x8.json",
			profiles: []string{"sm120-fp4-cudnn", "any-fp8"}, args: []string{"--quantization=fp8"},
			want: []string{"any-fp8"}},
		// No host could match: the recipe's fault (exit 2), said as such.
		{name: "no quantization in args", fixture: "rtx-pro-6000-x8.json",
			profiles: []string{"sm120-fp4-cudnn"}, args: []string{},
			wantErr: exitcode.ErrUsage, mention: []string{"match.quantization", "--quantization arg, which is not set", "sm120-fp4-cudnn wants modelopt_fp4"}},
		{name: "undefined profile", fixture: "rtx-pro-6000-x8.json",
			profiles: []string{"nope"}, wantErr: exitcode.ErrUsage, mention: []string{`"nope"`}},
		{name: "no GPU facts", fixture: "",
			profiles: []string{"sm120-fp4-cudnn"}, wantErr: exitcode.ErrHost, mention: []string{"no GPU facts were gathered", "requires: gpu"}},
		{name: "no GPUs", fixture: "zero",
			profiles: []string{"sm120-fp4-cudnn"}, wantErr: exitcode.ErrHost, mention: []string{"no GPU was found"}},
		{name: "no profiles", fixture: "rtx-pro-6000-x8.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(t, tt.fixture)
			spec := qwenSpec()
			spec.Profiles = tt.profiles
			if tt.args != nil {
				spec.Args = tt.args
			}
			s := newStep(t, spec)
			got, err := s.candidates(env)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				for _, m := range tt.mention {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not mention %q", err, m)
					}
				}
				if _, err := s.Fingerprint(context.Background(), env); !errors.Is(err, tt.wantErr) {
					t.Errorf("Fingerprint error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTPDefaultsToGPUCount(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		args    []string
		want    string
	}{
		{"eight GPUs", "rtx-pro-6000-x8.json", nil, "--tp 8"},
		{"one GPU", "h200-x1.json", nil, "--tp 1"},
		{"args set --tp", "rtx-pro-6000-x8.json", []string{"--tp", "4"}, "--tp 4"},
		{"args set --tp-size", "rtx-pro-6000-x8.json", []string{"--tp-size=2"}, "--tp-size=2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(t, tt.fixture)
			spec := qwenSpec()
			spec.Profiles = nil
			spec.Args = tt.args
			s := newStep(t, spec)
			unit, err := s.render(env, "")
			if err != nil {
				t.Fatal(err)
			}
			line := execStart(t, unit)
			if !strings.Contains(line, " "+tt.want) {
				t.Errorf("ExecStart=%s lacks %q", line, tt.want)
			}
			if strings.Count(line, "--tp") != 1 {
				t.Errorf("ExecStart=%s sets the tensor-parallel size more than once", line)
			}
		})
	}
}

func execStart(t *testing.T, unit []byte) string {
	t.Helper()
	u, err := service.ParseUnit(unit)
	if err != nil {
		t.Fatal(err)
	}
	return u.Value("Service", "ExecStart")
}

func TestRunRestartsOnlyOnChange(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	ctx := context.Background()
	s := newStep(t, qwenSpec())
	fm := withFake(t, env)

	ok, reason, err := s.Intact(ctx, env)
	if err != nil || ok || !strings.Contains(reason, "sglang-qwen.service (missing)") {
		t.Fatalf("Intact before install = %v %q %v", ok, reason, err)
	}
	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"install changed=true", "restart"}, fm.take()); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	if s.Active(env) != "sm120-fp4-cudnn" {
		t.Errorf("Active = %q", s.Active(env))
	}
	if ok, reason, err := s.Intact(ctx, env); err != nil || !ok {
		t.Fatalf("Intact after run = %v %q %v", ok, reason, err)
	}
	fp1, err := s.Fingerprint(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if fp1["profiles"] != "sm120-fp4-cudnn,sm120-fp4-cutlass" || !strings.HasPrefix(fp1["template"], "sha256:") {
		t.Errorf("fingerprint %v", fp1)
	}

	// A second apply with nothing changed restarts nothing.
	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"install changed=false", "start"}, fm.take()); diff != "" {
		t.Errorf("second run (-want +got):\n%s", diff)
	}

	// A needed step ran (a rebuilt kernel): the unit is the same, the server restarts.
	env.DepsRan = []string{"sgl-kernel"}
	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	env.DepsRan = nil
	if diff := cmp.Diff([]string{"install changed=false", "restart"}, fm.take()); diff != "" {
		t.Errorf("run after a needed step ran (-want +got):\n%s", diff)
	}

	// The service stopped: not intact.
	fm.state = "failed"
	if ok, reason, _ := s.Intact(ctx, env); ok || reason != "service sglang-qwen.service is failed ()" {
		t.Errorf("Intact with a failed service = %v %q", ok, reason)
	}

	// A changed argument changes the unit: not intact, and the run restarts.
	spec := qwenSpec()
	spec.Args = append(spec.Args, "--mem-fraction-static", "0.85")
	s2 := newStep(t, spec)
	ok, reason, err = s2.Intact(ctx, env)
	if err != nil || ok || reason != "outputs changed: "+fm.UnitPath("sglang-qwen.service") {
		t.Errorf("Intact with changed args = %v %q %v", ok, reason, err)
	}
	fp2, _ := s2.Fingerprint(ctx, env)
	if fp2["unit"] == fp1["unit"] || fp2["template"] != fp1["template"] {
		t.Errorf("fingerprints %v then %v", fp1, fp2)
	}
	if err := s2.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"install changed=true", "restart"}, fm.take()); diff != "" {
		t.Errorf("run after a change (-want +got):\n%s", diff)
	}
}

func TestProfileFallbackAndLastKnownGood(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	ctx := context.Background()
	s := newStep(t, qwenSpec())
	fm := withFake(t, env)
	unitPath := fm.UnitPath("sglang-qwen.service")
	lkgPath := service.LastKnownGoodPath(env.StateDir, "sglang-qwen.service")

	fpBefore, err := s.Fingerprint(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sm120-fp4-cudnn", "sm120-fp4-cutlass"}, s.Candidates(env)); diff != "" {
		t.Errorf("candidates before a winner (-want +got):\n%s", diff)
	}
	// The gate fails cudnn; cutlass is tried next and passes.
	if _, err := switchTo(t, s, env, s.Candidates(env), []string{"sm120-fp4-cutlass"}, nil); err != nil {
		t.Fatal(err)
	}
	if s.Active(env) != "sm120-fp4-cutlass" {
		t.Errorf("Active = %q", s.Active(env))
	}
	lkg, err := os.ReadFile(lkgPath)
	if err != nil || !bytes.Contains(lkg, []byte("Profile: sm120-fp4-cutlass.")) {
		t.Fatalf("last-known-good %q %v", lkg, err)
	}
	// The winner is tried first from now on.
	if diff := cmp.Diff([]string{"sm120-fp4-cutlass", "sm120-fp4-cudnn"}, s.Candidates(env)); diff != "" {
		t.Errorf("candidates after a winner (-want +got):\n%s", diff)
	}
	// The fingerprint does not move with the winner: the next apply skips the step.
	fpAfter, _ := s.Fingerprint(ctx, env)
	if diff := cmp.Diff(fpBefore, fpAfter); diff != "" {
		t.Errorf("fingerprint changed with the winner (-before +after):\n%s", diff)
	}
	if ok, reason, _ := s.Intact(ctx, env); !ok {
		t.Errorf("not intact after the winner was recorded: %s", reason)
	}

	// Later the winner stops passing; cudnn is tried and fails too; the last-known-good
	// unit comes back (the exec-like manager reinstalls it).
	fm.take()
	if _, err := switchTo(t, s, env, []string{"sm120-fp4-cudnn"}, nil, func(srv switchover.Server) {
		if b, _ := os.ReadFile(unitPath); srv.Profile != "" && bytes.Equal(b, lkg) {
			t.Error("the candidate's unit is not the one installed during its gate")
		}
	}); err == nil {
		t.Fatal("a failed gate passed the switch")
	}
	if b, _ := os.ReadFile(unitPath); !bytes.Equal(b, lkg) {
		t.Errorf("restored unit differs from the last-known-good one")
	}
	if s.Active(env) != "sm120-fp4-cutlass" {
		t.Errorf("Active after restore = %q", s.Active(env))
	}
	// The candidate on a side port, where it fails: it never served on the served port.
	if diff := cmp.Diff([]string{"install changed=true", "restart", "install changed=true", "restart"}, fm.take()); diff != "" {
		t.Errorf("switch then restore (-want +got):\n%s", diff)
	}

}

func TestRestartFailureAndFailed(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	ctx := context.Background()
	s := newStep(t, qwenSpec())
	if failed, _, err := s.Failed(ctx); failed || err != nil {
		t.Errorf("Failed before anything = %v %v", failed, err)
	}
	fm := withFake(t, env)
	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	fm.failRestart = "Profile: sm120-fp4-cudnn."
	if err := s.Restart(ctx, env); err == nil {
		t.Fatal("Restart succeeded though the restart failed")
	}
	failed, lines, err := s.Failed(ctx)
	if !failed || lines != "last lines" || err != nil {
		t.Errorf("Failed = %v %q %v", failed, lines, err)
	}
}

func TestOfflineUnderRoot(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Root = t.TempDir()
	env.Offline = true
	ctx := context.Background()
	spec := qwenSpec()
	spec.Manager = "systemd"
	s := newStep(t, spec)
	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(env.Root, "etc/systemd/system/sglang-qwen.service")
	if _, err := os.Stat(unit); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(env.Root, "etc/systemd/system/multi-user.target.wants/sglang-qwen.service")
	if target, err := os.Readlink(link); err != nil || target != "/etc/systemd/system/sglang-qwen.service" {
		t.Errorf("enable link -> %q %v", target, err)
	}
	if ok, reason, err := s.Intact(ctx, env); !ok || err != nil {
		t.Errorf("Intact = %v %q %v", ok, reason, err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if ok, reason, _ := s.Intact(ctx, env); ok || reason != "outputs changed: /etc/systemd/system/multi-user.target.wants/sglang-qwen.service" {
		t.Errorf("Intact without the link = %v %q", ok, reason)
	}
	if err := os.WriteFile(unit, []byte("[Service]\nExecStart=/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, reason, _ := s.Intact(ctx, env); ok || reason != "outputs changed: /etc/systemd/system/sglang-qwen.service" {
		t.Errorf("Intact with an edited unit = %v %q", ok, reason)
	}
	if failed, _, _ := s.Failed(ctx); failed {
		t.Error("offline service failed")
	}
}

func TestExecManagerEndToEnd(t *testing.T) {
	env := testEnv(t, "h200-x1.json")
	ctx := context.Background()
	marker := filepath.Join(t.TempDir(), "args")
	spec := Spec{
		NeedsCommands: noNeeds(),
		Unit:          "fake-sglang.service",
		Manager:       "exec",
		Command:       []string{"/bin/sh", "-c", `printf '%s\n' "$@" > ` + marker + `; exec sleep 60`, "fake-server"},
		ModelPath:     "/models/tiny",
		Port:          "31000",
		Env:           map[string]string{"FAKE_MODE": "good"},
	}
	s := newStep(t, spec)
	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var args []byte
	for time.Now().Before(deadline) {
		if args, _ = os.ReadFile(marker); len(args) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want := "--model-path\n/models/tiny\n--host\n127.0.0.1\n--port\n31000\n--tp\n1\n"; string(args) != want {
		t.Errorf("the server got args %q, want %q", args, want)
	}
	if ok, reason, err := s.Intact(ctx, env); !ok || err != nil {
		t.Errorf("Intact while running = %v %q %v", ok, reason, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A later apply (a new process) finds the unit in place but nothing running.
	s2 := newStep(t, spec)
	ok, reason, err := s2.Intact(ctx, env)
	if ok || err != nil || reason != "service fake-sglang.service is inactive (dead)" {
		t.Errorf("Intact in a new process = %v %q %v", ok, reason, err)
	}
}

func TestTemplateFromRecipeDir(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	tmpl := "[Service]\nExecStart={{ exec .Argv }}\n"
	if err := os.MkdirAll(filepath.Join(env.RecipeDir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.RecipeDir, "templates/x.tmpl"), []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := qwenSpec()
	spec.Template = "templates/x.tmpl"
	s := newStep(t, spec)
	unit, err := s.render(env, "sm120-fp4-cutlass")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(unit), "# Managed by sglprov. Recipe: qwen3.5-397b-a17b-nvfp4-sm120. Profile: sm120-fp4-cutlass. Fingerprint: ") {
		t.Errorf("unit:\n%s", unit)
	}
	spec.Template = "templates/missing.tmpl"
	s = newStep(t, spec)
	if _, err := s.Fingerprint(context.Background(), env); !errors.Is(err, exitcode.ErrUsage) {
		t.Errorf("missing template: %v", err)
	}
}

func TestSpecChecks(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Spec)
		mention string
	}{
		{"no unit", func(s *Spec) { s.Unit = "" }, "unit is required"},
		{"not a service", func(s *Spec) { s.Unit = "x.timer" }, "not a valid service unit name"},
		{"slash in unit", func(s *Spec) { s.Unit = "../x.service" }, "not a valid"},
		{"bad manager", func(s *Spec) { s.Manager = "upstart" }, "upstart"},
		{"bad port", func(s *Spec) { s.Port = "http" }, "port"},
		{"port out of range", func(s *Spec) { s.Port = "70000" }, "port"},
		{"no model path", func(s *Spec) { s.ModelPath = "" }, "model_path"},
		{"newline in args", func(s *Spec) { s.Args = []string{"--x", "a\nb"} }, "args[1]"},
		{"control char in env", func(s *Spec) { s.Env = map[string]string{"K": "\x01"} }, "K"},
		{"relative command", func(s *Spec) { s.Command = []string{"venv/bin/python"} }, "relative"},
		{"profile twice", func(s *Spec) { s.Profiles = []string{"a", "a"} }, "twice"},
		{"newline in user", func(s *Spec) { s.User = "a\nb" }, "user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := qwenSpec()
			tt.mutate(&spec)
			_, err := New("svc", spec)
			if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("New = %v, want a usage error mentioning %q", err, tt.mention)
			}
		})
	}
	spec := qwenSpec()
	spec.ModelPath = ""
	spec.Args = append(spec.Args, "--model-path", "/m")
	if _, err := New("svc", spec); err != nil {
		t.Errorf("--model-path in args: %v", err)
	}
}

func TestKindDecodesRecipeBody(t *testing.T) {
	body := `
unit: sglang-qwen.service
template: templates/sglang.service.tmpl
profiles: [sm120-fp4-cudnn, sm120-fp4-cutlass]
args: [--quantization, modelopt_fp4, --tp, "8", --reasoning-parser, qwen3]
env: {NCCL_DEBUG: WARN}
model_path: /var/lib/sglprov/models/q
port: 30000
manager: exec
command: [/opt/sglang/.venv/bin/python, -m, sglang.launch_server]
user: sglang
host: 0.0.0.0
working_directory: /var/lib/sglang
`
	k := Kind()
	spec := k.NewSpec()
	dec := yaml.NewDecoder(strings.NewReader(body))
	dec.KnownFields(true)
	if err := dec.Decode(spec); err != nil {
		t.Fatal(err)
	}
	st, err := k.New("sglang-service", spec)
	if err != nil {
		t.Fatal(err)
	}
	svc, ok := st.(engine.ServiceStep)
	if !ok {
		t.Fatal("the systemd step is not an engine.ServiceStep")
	}
	if svc.ServiceName() != "sglang-qwen.service" {
		t.Errorf("ServiceName = %q", svc.ServiceName())
	}
	if _, err := k.New("x", &struct{}{}); err == nil {
		t.Error("New accepted a foreign spec")
	}
}

// A relative working_directory is the folder of that name beside the recipe, as every
// step's dirs are; an absolute one, "~" and the "-" prefix keep their meaning.
func TestWorkingDirectoryRelativeToRecipe(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	for wd, want := range map[string]string{
		"srv":          filepath.Join(env.RecipeDir, "srv"),
		"-srv/run":     "-" + filepath.Join(env.RecipeDir, "srv/run"),
		"/var/lib/sgl": "/var/lib/sgl",
		"-/var/lib/x":  "-/var/lib/x",
		"~":            "~",
	} {
		spec := qwenSpec()
		spec.WorkingDirectory = wd
		unit, err := newStep(t, spec).render(env, "sm120-fp4-cutlass")
		if err != nil {
			t.Fatal(err)
		}
		if line := "\nWorkingDirectory=" + want + "\n"; !strings.Contains(string(unit), line) {
			t.Errorf("working_directory %q: the unit has no line %q:\n%s", wd, strings.TrimSpace(line), unit)
		}
	}
}
