package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Paths inside the container.
const (
	recipePath = "/etc/sglprov/recipe.yaml"
	stateDir   = "/var/lib/sglprov"
	unitName   = "sglang-e2e.service"
	unitPath   = "/etc/systemd/system/" + unitName
)

// e2eRecipe is the seed's recipe cut down to its service and its gate, with the fake
// server as the command. By default the fake answers "!!!!" with the cudnn FP4 backend and
// well with the cutlass one, as the seed's server did. Its vars turn the fake's faults on:
// also_broken_if breaks a second flag value, fake_mode sets SGLANG_FAKE_MODE (e.g. crash).
const e2eRecipe = `apiVersion: sglprov/v1
name: e2e-systemd
vars:
  port: "30000"
  fake_mode: good
  broken_if: fp4-gemm-backend=flashinfer_cudnn
  also_broken_if: none
  ready_timeout: 90s
profiles:
  sm120-fp4-cudnn:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--attention-backend, triton, --moe-runner-backend, flashinfer_cutlass,
           --fp4-gemm-backend, flashinfer_cudnn]
    env: {SGLANG_DISABLE_DEEP_GEMM: "1"}
  sm120-fp4-cutlass:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--attention-backend, triton, --moe-runner-backend, flashinfer_cutlass,
           --fp4-gemm-backend, flashinfer_cutlass]
steps:
  - name: sglang-service
    systemd:
      unit: sglang-e2e.service
      template: templates/sglang.service.tmpl
      manager: systemd
      # The fake server execs no compiler; TestServicePath checks the default list.
      needs_commands: []
      command: [/usr/local/bin/fake-sglang, -m, sglang.launch_server]
      model_path: /var/lib/sglprov/models/Qwen3.5-397B-A17B-NVFP4
      port: "{{ .vars.port }}"
      profiles: [sm120-fp4-cudnn, sm120-fp4-cutlass]
      args: [--quantization, modelopt_fp4, --tp, "{{ .gpu.count }}", --reasoning-parser, qwen3,
             "--fake-broken-if={{ .vars.broken_if }}", "--fake-broken-if={{ .vars.also_broken_if }}"]
      env: {SGLANG_FAKE_MODE: "{{ .vars.fake_mode }}"}
  - name: smoke
    needs: [sglang-service]
    smoke:
      url: "http://127.0.0.1:{{ .vars.port }}"
      ready_timeout: "{{ .vars.ready_timeout }}"
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
`

// binaries are the programs copied into each container.
type binaries struct {
	sglprov, fake string
}

// buildBinaries builds sglprov (with cgo, as shipped: it links the container's glibc, the
// same bookworm glibc as the build host's) and the fake server (static). SGLPROV_E2E_SGLPROV
// names a prebuilt sglprov instead.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the binaries: %v", err)
	}
	dir := t.TempDir()
	b := binaries{sglprov: os.Getenv("SGLPROV_E2E_SGLPROV"), fake: filepath.Join(dir, "fake-sglang")}
	type target struct {
		out, pkg, cgo string
	}
	targets := []target{{b.fake, "github.com/sglprov/sglprov/test/fakesglang/cmd/fake-sglang", "0"}}
	if b.sglprov == "" {
		b.sglprov = filepath.Join(dir, "sglprov")
		targets = append(targets, target{b.sglprov, "github.com/sglprov/sglprov/cmd/sglprov", "1"})
	}
	for _, tg := range targets {
		start := time.Now()
		cmd := exec.Command(goBin, "build", "-o", tg.out, tg.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+tg.cgo, "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", tg.pkg, err, out)
		}
		t.Logf("built %s in %s", filepath.Base(tg.out), time.Since(start).Round(10*time.Millisecond))
	}
	return b
}

// host is a booted container set up to run sglprov: binaries, GPU fixture, recipe and
// template in place.
type host struct {
	*Container
}

func newHost(t *testing.T, b binaries) *host {
	t.Helper()
	c := bootContainer(t)
	c.CopyIn(b.sglprov, "/usr/local/bin/sglprov", 0o755)
	c.CopyIn(b.fake, "/usr/local/bin/fake-sglang", 0o755)
	c.CopyIn("../../testdata/gpu/rtx-pro-6000-x8.json", "/etc/sglprov/gpu.json", 0o644)
	c.CopyIn("../../templates/sglang.service.tmpl", "/etc/sglprov/templates/sglang.service.tmpl", 0o644)
	c.WriteFile(recipePath, []byte(e2eRecipe), 0o644)
	return &host{c}
}

// applied is the outcome of one sglprov apply.
type applied struct {
	out  string
	code int
	took time.Duration
}

// apply runs sglprov apply inside the container with extra flags (e.g. --set KEY=VALUE).
func (h *host) apply(extra ...string) applied {
	h.t.Helper()
	argv := []string{"SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json",
		"sglprov", "apply", "-f", recipePath, "--state-dir", stateDir}
	argv = append(argv, extra...)
	start := time.Now()
	out, code := h.Run(5*time.Minute, argv...)
	a := applied{out: out, code: code, took: time.Since(start)}
	h.t.Logf("sglprov apply %s: exit %d in %s", strings.Join(extra, " "), code, a.took.Round(10*time.Millisecond))
	return a
}

// mustApply runs apply and fails the test unless it exits 0.
func (h *host) mustApply(extra ...string) applied {
	h.t.Helper()
	a := h.apply(extra...)
	if a.code != 0 {
		h.t.Fatalf("sglprov apply %s: exit %d, want 0\n%s\n%s", strings.Join(extra, " "), a.code, a.out, h.journal())
	}
	return a
}

// journal returns the service's last journal lines, for failure messages.
func (h *host) journal() string {
	out, _, _ := h.exec(h.t.Context(), 20*time.Second, "journalctl", "-u", unitName, "-n", "30", "--no-pager")
	return "journal of " + unitName + ":\n" + out
}

// lastReport reads the newest run's report.json from the state folder.
func (h *host) lastReport() *engine.Report {
	h.t.Helper()
	runs, err := filepath.Glob(filepath.Join(h.Root, stateDir, "runs", "*", "report.json"))
	if err != nil || len(runs) == 0 {
		h.t.Fatalf("no report under %s/runs (%v)", stateDir, err)
	}
	sort.Strings(runs)
	b, err := os.ReadFile(runs[len(runs)-1])
	if err != nil {
		h.t.Fatalf("reading the report: %v", err)
	}
	var rep engine.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		h.t.Fatalf("decoding %s: %v", runs[len(runs)-1], err)
	}
	return &rep
}

// profileVerdict is one candidate profile in the smoke step's report details.
type profileVerdict struct {
	Profile string `json:"profile"`
	Error   string `json:"error"`
	Result  *struct {
		Pass   bool   `json:"pass"`
		Reason string `json:"reason"`
		Cases  []struct {
			Name   string `json:"name"`
			Pass   bool   `json:"pass"`
			Reason string `json:"reason"`
			Sample string `json:"sample"`
		} `json:"cases"`
	} `json:"result"`
	// StagePort is the side port the profile was gated on before it served (0: the
	// served port).
	StagePort int `json:"stage_port"`
}

func (p profileVerdict) pass() bool { return p.Error == "" && p.Result != nil && p.Result.Pass }

func (p profileVerdict) String() string {
	if p.Error != "" {
		return p.Profile + ": " + p.Error
	}
	if p.Result == nil {
		return p.Profile + ": no result"
	}
	s := fmt.Sprintf("%s: pass=%v %s", p.Profile, p.Result.Pass, p.Result.Reason)
	for _, c := range p.Result.Cases {
		s += fmt.Sprintf(" [%s pass=%v %s %q]", c.Name, c.Pass, c.Reason, c.Sample)
	}
	return s
}

// step returns the named step of a report.
func step(t *testing.T, rep *engine.Report, name string) *engine.StepReport {
	t.Helper()
	for _, s := range rep.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no step %q in the report (steps: %d)", name, len(rep.Steps))
	return nil
}

// verdicts returns the profiles the smoke step tried, in order, from the report.
func verdicts(t *testing.T, rep *engine.Report) []profileVerdict {
	t.Helper()
	s := step(t, rep, "smoke")
	raw, ok := s.Details["profiles"]
	if !ok {
		t.Fatalf("the smoke step's report has no profiles detail: %v", s.Details)
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatalf("encoding the profiles detail: %v", err)
	}
	var out []profileVerdict
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decoding the profiles detail: %v\n%s", err, b)
	}
	return out
}

// runtimeProps are the properties that change whenever systemd (re)starts the service.
var runtimeProps = []string{"MainPID", "InvocationID", "ActiveEnterTimestamp"}

// TestApply drives sglprov apply against real systemd: each case boots its own container.
func TestApply(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)

	t.Run("first apply installs enables and starts the unit", func(t *testing.T) {
		h := newHost(t, bins)
		a := h.mustApply()
		if out, code := h.Run(10*time.Second, "systemctl", "is-enabled", unitName); code != 0 || strings.TrimSpace(out) != "enabled" {
			t.Errorf("systemctl is-enabled %s = %q (exit %d), want enabled", unitName, strings.TrimSpace(out), code)
		}
		if out, code := h.Run(10*time.Second, "systemctl", "is-active", unitName); code != 0 || strings.TrimSpace(out) != "active" {
			t.Errorf("systemctl is-active %s = %q (exit %d), want active", unitName, strings.TrimSpace(out), code)
		}
		rep := h.lastReport()
		if rep.Result != engine.ResultOK || rep.ExitCode != 0 {
			t.Errorf("report: result %q exit %d, want ok 0\n%s", rep.Result, rep.ExitCode, a.out)
		}
		for _, name := range []string{"sglang-service", "smoke"} {
			if s := step(t, rep, name); s.Result != engine.ResultOK {
				t.Errorf("step %s: %s (%s), want ok", name, s.Result, s.Error)
			}
		}
		unit := string(h.ReadFile(unitPath))
		for _, want := range []string{"/usr/local/bin/fake-sglang -m sglang.launch_server", "--port 30000", "--tp 8"} {
			if !strings.Contains(unit, want) {
				t.Errorf("installed unit lacks %q:\n%s", want, unit)
			}
		}
	})

	t.Run("second apply changes nothing and restarts nothing", func(t *testing.T) {
		h := newHost(t, bins)
		h.mustApply()
		before := h.Show(unitName, runtimeProps...)
		unitBefore := h.ReadFile(unitPath)
		info, err := os.Stat(filepath.Join(h.Root, unitPath))
		if err != nil {
			t.Fatal(err)
		}
		a := h.mustApply()
		after := h.Show(unitName, runtimeProps...)
		for _, p := range runtimeProps {
			if before[p] != after[p] {
				t.Errorf("%s changed on the second apply: %q -> %q (the service was restarted)\n%s", p, before[p], after[p], a.out)
			}
		}
		if got := h.ReadFile(unitPath); string(got) != string(unitBefore) {
			t.Errorf("the unit file changed on the second apply:\n%s\n---\n%s", unitBefore, got)
		}
		if info2, err := os.Stat(filepath.Join(h.Root, unitPath)); err != nil || !info2.ModTime().Equal(info.ModTime()) {
			t.Errorf("the unit file was rewritten on the second apply (mtime %v -> %v, %v)", info.ModTime(), info2.ModTime(), err)
		}
		rep := h.lastReport()
		if s := step(t, rep, "sglang-service"); s.Result != engine.ResultSkipped {
			t.Errorf("second apply: service step %s (%s), want skipped", s.Result, s.Reason)
		}

		if v := verdicts(t, rep); len(v) != 1 || v[0].Profile != "sm120-fp4-cutlass" || !v[0].pass() {
			t.Errorf("second apply: the gate tried %v, want sm120-fp4-cutlass (last run's winner) only, passing", v)
		}
	})

	t.Run("changed var rewrites the unit and restarts the service", func(t *testing.T) {
		h := newHost(t, bins)
		h.mustApply()
		before := h.Show(unitName, runtimeProps...)
		unitBefore := string(h.ReadFile(unitPath))
		a := h.mustApply("--set", "port=30001")
		after := h.Show(unitName, runtimeProps...)
		for _, p := range []string{"MainPID", "InvocationID"} {
			if before[p] == after[p] {
				t.Errorf("%s unchanged (%q) after the port changed: the service was not restarted\n%s", p, after[p], a.out)
			}
		}
		unit := string(h.ReadFile(unitPath))
		if unit == unitBefore {
			t.Errorf("the unit file did not change with the port:\n%s", unit)
		}
		if !strings.Contains(unit, "--port 30001") || strings.Contains(unit, "--port 30000") {
			t.Errorf("the unit does not listen on 30001 only:\n%s", unit)
		}
		if out, code := h.Run(10*time.Second, "systemctl", "is-active", unitName); code != 0 {
			t.Errorf("systemctl is-active after the change: %q (exit %d)", strings.TrimSpace(out), code)
		}
		if v := verdicts(t, h.lastReport()); len(v) == 0 || !v[len(v)-1].pass() {
			t.Errorf("the gate on port 30001 did not pass: %v", v)
		}
	})

	t.Run("broken first profile falls back to the second", func(t *testing.T) {
		h := newHost(t, bins)
		a := h.mustApply()
		v := verdicts(t, h.lastReport())
		if len(v) != 2 || v[0].Profile != "sm120-fp4-cudnn" || v[1].Profile != "sm120-fp4-cutlass" {
			t.Fatalf("the gate tried %v, want sm120-fp4-cudnn then sm120-fp4-cutlass", v)
		}
		if v[0].pass() {
			t.Errorf("sm120-fp4-cudnn passed; the fake answers \"!!!!\" with flashinfer_cudnn: %v", v[0])
		}
		if !v[1].pass() {
			t.Errorf("sm120-fp4-cutlass did not pass: %v", v[1])
		}
		for _, want := range []string{"sm120-fp4-cudnn", "sm120-fp4-cutlass"} {
			if !strings.Contains(a.out, want) {
				t.Errorf("apply output does not name %s:\n%s", want, a.out)
			}
		}
		unit := string(h.ReadFile(unitPath))
		if !strings.Contains(unit, "sm120-fp4-cutlass") || !strings.Contains(unit, "--fp4-gemm-backend flashinfer_cutlass") ||
			strings.Contains(unit, "--fp4-gemm-backend flashinfer_cudnn") {
			t.Errorf("the installed unit is not the cutlass profile's:\n%s", unit)
		}
		if j := h.journal(); !strings.Contains(j, "broken by --fp4-gemm-backend=flashinfer_cudnn") {
			t.Errorf("the journal does not show the cudnn server's start:\n%s", j)
		}
	})

	t.Run("all profiles broken restores the last-known-good unit and exits 3", func(t *testing.T) {
		h := newHost(t, bins)
		h.mustApply()
		good := string(h.ReadFile(unitPath))
		poll := startPoller(t, h.PID, 30000, nil)
		a := h.apply("--set", "also_broken_if=fp4-gemm-backend=flashinfer_cutlass")
		seen := poll.finish()
		if a.code != 3 {
			t.Fatalf("apply with every profile broken: exit %d, want 3\n%s\n%s", a.code, a.out, h.journal())
		}
		// No drain hook: the broken profiles are gated on a side port, never on the served one.
		t.Logf("failed switch, every profile broken: poller saw %d right, %d wrong, %d without an answer", seen.Right, seen.Wrong, seen.Down)
		if seen.Wrong != 0 {
			t.Errorf("broken profiles served %d wrong answers on the served port (first %.80q), want none", seen.Wrong, seen.FirstWrong)
		}
		rep := h.lastReport()
		v := verdicts(t, rep)
		if len(v) != 2 {
			t.Errorf("the gate tried %v, want both profiles", v)
		}
		for _, p := range v {
			if p.pass() {
				t.Errorf("profile passed with every profile broken: %v", p)
			}
			if p.StagePort == 0 || p.StagePort == 30000 {
				t.Errorf("profile %s was gated on port %d, want a side port", p.Profile, p.StagePort)
			}
		}
		if restored, _ := step(t, rep, "smoke").Details["restored_last_known_good"].(bool); !restored {
			t.Errorf("the report does not say the last-known-good unit was restored: %v", step(t, rep, "smoke").Details)
		}
		if got := string(h.ReadFile(unitPath)); got != good {
			t.Errorf("the installed unit is not the last-known-good one:\n%s\n--- want ---\n%s", got, good)
		}
		if out, code := h.Run(10*time.Second, "systemctl", "is-active", unitName); code != 0 || strings.TrimSpace(out) != "active" {
			t.Errorf("the restored service is %q (exit %d), want active", strings.TrimSpace(out), code)
		}
	})

	t.Run("unit that crashes on start fails the gate quickly", func(t *testing.T) {
		h := newHost(t, bins)
		const readyTimeout = 3 * time.Minute
		a := h.apply("--set", "fake_mode=crash", "--set", "ready_timeout="+readyTimeout.String())
		if a.code != 3 {
			t.Errorf("apply with a crashing server: exit %d, want 3\n%s", a.code, a.out)
		}
		if a.took >= readyTimeout/3 {
			t.Errorf("apply with a crashing server took %s, want well under the ready timeout %s (< %s)\n%s",
				a.took.Round(time.Second), readyTimeout, readyTimeout/3, a.out)
		}
		v := verdicts(t, h.lastReport())
		if len(v) != 2 {
			t.Errorf("the gate tried %v, want both profiles", v)
		}
		for _, p := range v {
			if p.pass() {
				t.Errorf("a crashing server passed the gate: %v", p)
			}
		}
		if !strings.Contains(a.out, "no kernel image is available") {
			t.Errorf("apply output lacks the crashed server's journal lines:\n%s\n%s", a.out, h.journal())
		}
	})
}
