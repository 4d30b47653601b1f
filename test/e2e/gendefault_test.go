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
// puts the link at /opt/app; a driver upgrade then rebuilds nothing.
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
}
