package systemd_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/steps"
	"github.com/sglprov/sglprov/pkg/steps/systemd"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// fakeServerEnv makes the test binary act as the fake SGLang server: the exec manager
// starts it as the unit's ExecStart.
const fakeServerEnv = "SGLPROV_TEST_FAKE_SGLANG"

func TestMain(m *testing.M) {
	if os.Getenv(fakeServerEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := fakesglang.Main(ctx, os.Args[1:], os.Stderr, os.Getenv)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const e2eRecipe = `apiVersion: sglprov/v1
name: e2e-exec
vars:
  port: "PORT"
profiles:
  sm120-fp4-cudnn:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--attention-backend, triton, --moe-runner-backend, flashinfer_cutlass, --fp4-gemm-backend, flashinfer_cudnn]
    env: {SGLANG_DISABLE_DEEP_GEMM: "1"}
  sm120-fp4-cutlass:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--attention-backend, triton, --moe-runner-backend, flashinfer_cutlass, --fp4-gemm-backend, flashinfer_cutlass]
  hopper:
    match: {compute_capability: ">=9.0,<10.0"}
    args: [--attention-backend, fa3]
steps:
  - name: sglang-service
    systemd:
      unit: sglang-e2e.service
      manager: exec
      needs_commands: []
      command: [TESTBIN, -m, sglang.launch_server]
      env: {SGLPROV_TEST_FAKE_SGLANG: "1"}
      model_path: /models/qwen
      port: "{{ .vars.port }}"
      profiles: [sm120-fp4-cudnn, hopper, sm120-fp4-cutlass]
      args: [--quantization, modelopt_fp4, --tp, "{{ .gpu.count }}", --reasoning-parser, qwen3]
  - name: smoke
    needs: [sglang-service]
    smoke:
      url: "http://127.0.0.1:{{ .vars.port }}"
      ready_timeout: 20s
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
`

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// applyOnce runs one apply, as one sglprov process would, and closes the steps after it
// (which stops the exec manager's server).
func applyOnce(t *testing.T, path, stateDir string, facts *gpu.Facts) *engine.Report {
	t.Helper()
	reg := steps.Registry()
	var built []engine.Step
	k := systemd.Kind()
	reg["systemd"] = engine.Kind{NewSpec: k.NewSpec, New: func(name string, spec any) (engine.Step, error) {
		st, err := k.New(name, spec)
		if err == nil {
			built = append(built, st)
		}
		return st, err
	}}
	r, err := recipe.Load(path, steps.Specs(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Recipe: r, RecipeDir: filepath.Dir(path), Registry: reg, Facts: facts, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, st := range built {
			if err := st.(*systemd.Step).Close(); err != nil {
				t.Errorf("closing: %v", err)
			}
		}
	}()
	rep, err := e.Apply(context.Background())
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return rep
}

func stepReport(t *testing.T, rep *engine.Report, name string) *engine.StepReport {
	t.Helper()
	for _, s := range rep.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no step %q in the report", name)
	return nil
}

// triedProfiles returns the profiles the smoke step tried, from its report details.
func triedProfiles(t *testing.T, s *engine.StepReport) []string {
	t.Helper()
	b, err := json.Marshal(s.Details["profiles"])
	if err != nil {
		t.Fatal(err)
	}
	var prs []struct {
		Profile string `json:"profile"`
	}
	if err := json.Unmarshal(b, &prs); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range prs {
		out = append(out, p.Profile)
	}
	return out
}

func TestApplyWithExecManagerAndProfileFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	text := strings.NewReplacer("TESTBIN", bin, `"PORT"`, strconv.Quote(strconv.Itoa(port))).Replace(e2eRecipe)
	path := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	facts, err := gpu.LoadFixture("../../../testdata/gpu/rtx-pro-6000-x8.json")
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(dir, "state")

	// First apply: the cudnn profile answers "!!!!", the gate falls back to cutlass, which
	// passes and is kept as last-known-good.
	rep := applyOnce(t, path, stateDir, facts)
	if rep.Result != "ok" {
		t.Fatalf("first apply: %s %s", rep.Result, rep.Error)
	}
	smoke := stepReport(t, rep, "smoke")
	if got := strings.Join(triedProfiles(t, smoke), ","); got != "sm120-fp4-cudnn,sm120-fp4-cutlass" {
		t.Errorf("first apply tried %s", got)
	}
	lkg, ok, err := service.LoadLastKnownGood(stateDir, "sglang-e2e.service")
	if err != nil || !ok || !strings.Contains(string(lkg), "--fp4-gemm-backend flashinfer_cutlass") {
		t.Fatalf("last-known-good: %v %v\n%s", ok, err, lkg)
	}
	log, _ := os.ReadFile(filepath.Join(stateDir, "logs", "sglang-e2e.service.log"))
	if !strings.Contains(string(log), "broken by --fp4-gemm-backend=flashinfer_cudnn") {
		t.Errorf("the server log does not show the broken profile:\n%s", log)
	}

	// Second apply (a new process): the winner is tried first and passes at once.
	rep = applyOnce(t, path, stateDir, facts)
	if rep.Result != "ok" {
		t.Fatalf("second apply: %s %s", rep.Result, rep.Error)
	}
	if got := strings.Join(triedProfiles(t, stepReport(t, rep, "smoke")), ","); got != "sm120-fp4-cutlass" {
		t.Errorf("second apply tried %s", got)
	}
	svc := stepReport(t, rep, "sglang-service")
	if svc.Details["profile"] != "sm120-fp4-cutlass" || svc.Details["changed"] != false {
		t.Errorf("second apply's service step: %s %s %v", svc.Result, svc.Reason, svc.Details)
	}
}
