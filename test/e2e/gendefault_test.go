package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inPlaceRecipe has the shipped recipes' shape: the source at a fixed path (/opt/app), a
// build step in it, the unit running from it. It never names {{ .generation.dir }}; %s is
// the generations line ("generations: off" for a node provisioned in place, "" for the
// default).
const inPlaceRecipe = `apiVersion: sglprov/v1
name: e2e-gen
%s
vars:
  pin: v1
  sha: ""
  port: "30000"
  src: /opt/app
profiles:
  sm120-fp4-cudnn:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--attention-backend, triton, --moe-runner-backend, flashinfer_cutlass,
           --fp4-gemm-backend, flashinfer_cudnn]
  sm120-fp4-cutlass:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--attention-backend, triton, --moe-runner-backend, flashinfer_cutlass,
           --fp4-gemm-backend, flashinfer_cutlass]
steps:
  - name: app-src
    source: {url: "file:///srv/app-{{ .vars.pin }}.tar.gz", sha256: "{{ .vars.sha }}", dest: "{{ .vars.src }}"}
  - name: app-build
    needs: [app-src]
    build: {dir: "{{ .vars.src }}", argv: [sh, build.sh], outputs: [bin/server], exclude: [bin], jobs: 1}
  - name: sglang-service
    needs: [app-build]
    systemd:
      unit: sglang-e2e.service
      template: templates/sglang.service.tmpl
      manager: systemd
      needs_commands: []
      command: ["{{ .vars.src }}/bin/server", -m, sglang.launch_server]
      model_path: /var/lib/sglprov/models/Qwen3.5-397B-A17B-NVFP4
      port: "{{ .vars.port }}"
      profiles: [sm120-fp4-cudnn, sm120-fp4-cutlass]
      args: [--quantization, modelopt_fp4, --tp, "{{ .gpu.count }}", --reasoning-parser, qwen3]
  - name: smoke
    needs: [sglang-service]
    smoke:
      url: "http://127.0.0.1:{{ .vars.port }}"
      ready_timeout: 90s
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
`

// TestInPlaceNodeMigratesToGenerations: a node provisioned in place by a recipe of the
// shipped shape (generations: off) gets the same recipe with generations by default. A
// new pin whose build fails leaves the in-place tree serving through a restart and a
// reboot; a good pin builds the first generation, moves the in-place tree aside (kept) and
// puts the link at /opt/app; a driver upgrade then rebuilds nothing; a new pin whose gate
// fails exits 3 with the first generation serving again, and no wrong answer on the port.
func TestInPlaceNodeMigratesToGenerations(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	g.WriteFile(recipePath, []byte(strings.Replace(inPlaceRecipe, "%s", "generations: off", 1)), 0o644)

	a := g.applyPin("v1")
	if a.code != 0 {
		t.Fatalf("apply v1 in place: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	const inPlaceExe = "/opt/app/bin/fake-sglang"
	if got := g.servingExe(); got != inPlaceExe {
		t.Fatalf("in place the server runs %q, want %q", got, inPlaceExe)
	}

	g.WriteFile(recipePath, []byte(strings.Replace(inPlaceRecipe, "%s", "", 1)), 0o644)
	t.Run("new pin whose build fails: the in-place tree serves through a restart and a reboot", func(t *testing.T) {
		a := g.applyPin("v3-fail")
		if a.code != 1 {
			t.Fatalf("apply v3-fail: exit %d, want 1\n%s", a.code, a.out)
		}
		if fi, err := os.Lstat(filepath.Join(g.Root, "/opt/app")); err != nil || !fi.IsDir() {
			t.Fatalf("/opt/app after a failed build: %v, %v; want the in-place folder", fi, err)
		}
		if pin := g.catIn("/opt/app/PIN"); pin != "v1\n" {
			t.Errorf("the in-place tree changed: PIN %q", pin)
		}
		g.MustRun("systemctl", "restart", unitName)
		g.waitActive(30 * time.Second)
		if got := g.servingExe(); got != inPlaceExe {
			t.Errorf("after systemctl restart the server runs %q, want %q", got, inPlaceExe)
		}
		g.gate("after systemctl restart")
		g.Reboot()
		g.waitActive(60 * time.Second)
		if got := g.servingExe(); got != inPlaceExe {
			t.Errorf("after a reboot the server runs %q, want %q", got, inPlaceExe)
		}
		g.gate("after a reboot")
	})

	var gen1 string
	t.Run("good pin: the first generation serves, the in-place tree is kept aside", func(t *testing.T) {
		a := g.applyPin("v1")
		if a.code != 0 {
			t.Fatalf("apply v1 with generations: exit %d\n%s\n%s", a.code, a.out, g.journal())
		}
		gen1 = g.current()
		target, err := os.Readlink(filepath.Join(g.Root, "/opt/app"))
		if want := filepath.Join(genDir, gen1, "app"); err != nil || target != want {
			t.Fatalf("/opt/app links to %q (%v), want %s", target, err, want)
		}
		if got, want := g.servingExe(), filepath.Join(genDir, gen1, "app/bin/fake-sglang"); got != want {
			t.Errorf("the server runs %q, want %q", got, want)
		}
		if pin := g.catIn("/opt/app.sglprov-inplace/PIN"); pin != "v1\n" {
			t.Errorf("the in-place tree was not kept aside: PIN %q", pin)
		}
		g.gate("after the first generation")
	})

	t.Run("driver upgrade: nothing is built again", func(t *testing.T) {
		if gen1 == "" {
			t.Skip("needs the first generation")
		}
		fixture := string(g.ReadFile("/etc/sglprov/gpu.json"))
		g.WriteFile("/etc/sglprov/gpu.json", []byte(strings.Replace(fixture, `"driver_version": "580.95.05"`, `"driver_version": "590.48.01"`, 1)), 0o644)
		a := g.applyPin("v1")
		if a.code != 0 {
			t.Fatalf("apply after the driver upgrade: exit %d\n%s", a.code, a.out)
		}
		if g.current() != gen1 {
			t.Errorf("the driver upgrade made generation %s (was %s)", g.current(), gen1)
		}
		rep := g.lastReport()
		for _, name := range []string{"app-src", "app-build", "sglang-service"} {
			if s := step(t, rep, name); s.Result != "skipped" {
				t.Errorf("after the driver upgrade step %s: %s (%s), want skipped as unchanged", name, s.Result, s.Reason)
			}
		}
		if got, want := g.servingExe(), filepath.Join(genDir, gen1, "app/bin/fake-sglang"); got != want {
			t.Errorf("the server runs %q, want %q", got, want)
		}
	})

	t.Run("new pin whose gate fails: the first generation serves again, exit 3", func(t *testing.T) {
		if gen1 == "" {
			t.Skip("needs the first generation")
		}
		poll := startPoller(t, g.PID, 30000, nil)
		a := g.applyPin("v2-bad")
		seen := poll.finish()
		t.Logf("failed switch v1 -> v2-bad (shipped shape): poller saw %d right, %d wrong, %d without an answer", seen.Right, seen.Wrong, seen.Down)
		if a.code != 3 {
			t.Fatalf("apply v2-bad: exit %d, want 3\n%s", a.code, a.out)
		}
		if !strings.Contains(a.out, "of generation "+gen1[:12]+" was restored and passed the gate again") {
			t.Errorf("apply v2-bad does not say that generation 1 was restored and passed:\n%s", a.out)
		}
		if seen.Wrong != 0 {
			t.Errorf("the served port gave %d wrong answers (first %.80q) during the failed switch, want none", seen.Wrong, seen.FirstWrong)
		}
		target, err := os.Readlink(filepath.Join(g.Root, "/opt/app"))
		if want := filepath.Join(genDir, gen1, "app"); err != nil || target != want {
			t.Errorf("/opt/app links to %q (%v) after the failed gate, want %s", target, err, want)
		}
		if got, want := g.servingExe(), filepath.Join(genDir, gen1, "app/bin/fake-sglang"); got != want {
			t.Errorf("after the failed gate the server runs %q, want %q", got, want)
		}
		g.gate("after the failed gate")
	})
}

// TestDaemonRollsBackToInPlaceTree: a node provisioned in place, then migrated to its first
// generation (a pin that breaks later), climbs the daemon's ladder when that generation
// answers garbage: with no earlier generation, previous_generation points /opt/app back at
// the tree moved aside and puts its unit (the recipe's paths as written) through the
// switch; it passes, serves from the moved-aside tree, is what /etc starts after a reboot,
// and the record says the in-place tree serves.
func TestDaemonRollsBackToInPlaceTree(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	g.WriteFile(recipePath, []byte(strings.Replace(inPlaceRecipe, "%s", "generations: off", 1)), 0o644)
	if a := g.applyPin("v1"); a.code != 0 {
		t.Fatalf("apply v1 in place: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	g.WriteFile(recipePath, []byte(strings.Replace(inPlaceRecipe, "%s", "", 1)), 0o644)
	if a := g.applyPin("v6-late"); a.code != 0 {
		t.Fatalf("apply v6-late with generations: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen := g.current()
	if pin := g.catIn("/opt/app.sglprov-inplace/PIN"); pin != "v1\n" {
		t.Fatalf("the in-place tree was not moved aside: PIN %q", pin)
	}
	g.MustRun("systemd-run", "--unit", daemonUnit, "--setenv=SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json",
		"/usr/local/bin/sglprov", "daemon", "-f", recipePath, "--state-dir", stateDir,
		"--set", "pin=v6-late", "--set", "sha="+g.sums["v6-late"],
		"--interval", "1s", "--failures-before-restart", "1", "--canary-timeout", "60s",
		"--metrics-addr", "127.0.0.1:9477", "--textfile", textfilePath)
	d := &daemonHost{g.host}
	d.waitMetric(`sglprov_node_health\{recipe="e2e-gen",state="healthy"\} 1`, 2*time.Minute)

	g.WriteFile("/etc/sglprov/bad-gen", []byte("broken\n"), 0o644)
	d.waitMetric(`sglprov_remediation_total\{recipe="e2e-gen",result="ok",rung="previous_generation"\} 1`, 4*time.Minute)
	d.waitMetric(`sglprov_node_health\{recipe="e2e-gen",state="healthy"\} 1`, time.Minute)
	if target, err := os.Readlink(filepath.Join(g.Root, "/opt/app")); err != nil || target != "/opt/app.sglprov-inplace" {
		t.Errorf("after the roll back /opt/app links to %q (%v), want /opt/app.sglprov-inplace", target, err)
	}
	const asideExe = "/opt/app.sglprov-inplace/bin/fake-sglang"
	if got := g.servingExe(); got != asideExe {
		t.Errorf("after the roll back the server runs %q, want %q", got, asideExe)
	}
	if _, err := os.Lstat(filepath.Join(g.Root, genDir, "current")); err == nil {
		t.Errorf("the current link is still there while the in-place tree serves")
	}
	rec := string(g.ReadFile(filepath.Join(stateDir, "generations", "e2e-gen.json")))
	if !strings.Contains(rec, `"in_place"`) || !strings.Contains(rec, `"from": "`+gen+`"`) {
		t.Errorf("the generations record does not say the in-place tree serves:\n%s", rec)
	}
	unit := string(g.ReadFile("/etc/systemd/system/" + unitName))
	if !strings.Contains(unit, "/opt/app/bin/server") || strings.Contains(unit, genDir) {
		t.Errorf("the unit in /etc does not name the paths as written:\n%s", unit)
	}
	g.gate("after the roll back to the in-place tree")
	if pin := g.catIn("/opt/app.sglprov-inplace/PIN"); pin != "v1\n" {
		t.Errorf("the in-place tree changed: PIN %q", pin)
	}
	g.MustRun("systemctl", "stop", daemonUnit)
	g.Reboot()
	g.waitActive(60 * time.Second)
	if got := g.servingExe(); got != asideExe {
		t.Errorf("after a reboot the server runs %q, want %q", got, asideExe)
	}
	g.gate("after a reboot")
}
