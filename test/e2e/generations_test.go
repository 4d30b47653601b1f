package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// genRecipe builds its server into a generation: a source archive (the "pin") unpacked
// under {{ .generation.dir }}, a build that copies the fake server in beside a launcher
// script, and a unit whose command is the generation's launcher. The launcher adds the
// flags the pin's archive ships, so a pin can break the server (both profiles broken),
// slow it down, or fail its build.
const genRecipe = `apiVersion: sglprov/v1
name: e2e-gen
generations: {keep: 2}
vars:
  pin: v1
  sha: ""
  port: "30000"
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
    source: {url: "file:///srv/app-{{ .vars.pin }}.tar.gz", sha256: "{{ .vars.sha }}", dest: "{{ .generation.dir }}/app"}
  - name: app-build
    needs: [app-src]
    command: {argv: [sh, build.sh], dir: "{{ .generation.dir }}/app", creates: ["{{ .generation.dir }}/app/bin/server"]}
  - name: sglang-service
    needs: [app-build]
    systemd:
      unit: sglang-e2e.service
      template: templates/sglang.service.tmpl
      manager: systemd
      # The fake server execs no compiler; TestServicePath checks the default list.
      needs_commands: []
      command: ["{{ .generation.dir }}/app/bin/server", -m, sglang.launch_server]
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

// goodBuild copies the fake server into the generation and writes the launcher.
const goodBuild = `set -e
mkdir -p bin
cp /usr/local/bin/fake-sglang bin/fake-sglang
cat > bin/server <<'EOF'
#!/bin/sh
d=$(dirname "$0")
exec "$d/fake-sglang" "$@" $(cat "$d/../flags")
EOF
chmod +x bin/server
`

// slowServedBuild is goodBuild whose launcher, on the served port (30000, its last
// --port), makes the server not ready for 80 s: a candidate that passes on a side port
// and then waits in its gate on the served port.
const slowServedBuild = `set -e
mkdir -p bin
cp /usr/local/bin/fake-sglang bin/fake-sglang
cat > bin/server <<'EOF'
#!/bin/sh
d=$(dirname "$0")
port=30000 prev=
for a in "$@"; do [ "$prev" = --port ] && port=$a; prev=$a; done
slow=
[ "$port" = 30000 ] && slow=--fake-ready-after=80s
exec "$d/fake-sglang" "$@" $(cat "$d/../flags") $slow
EOF
chmod +x bin/server
`

// badBuild fails midway, as an sgl-kernel build that runs out of memory does.
const badBuild = `mkdir -p bin
echo "half a build" > bin/partial
echo "nvcc error: out of memory" >&2
exit 1
`

// fillBuild copies the server in as a good build does, then fills the disk its generation
// is on, as an sgl-kernel build whose objects outgrow the disk does.
const fillBuild = `set -e
mkdir -p bin
cp /usr/local/bin/fake-sglang bin/fake-sglang
dd if=/dev/zero of=bin/objects bs=1M
`

// pins are the source archives the test offers: what each one's build and flags are.
var pins = map[string][2]string{
	"v1":             {goodBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn"},
	"v2-bad":         {goodBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn --fake-broken-if=fp4-gemm-backend=flashinfer_cutlass"},
	"v3-fail":        {badBuild, ""},
	"v4":             {goodBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn --fake-latency=1ms"},
	"v5-slow":        {goodBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn --fake-ready-after=80s"},
	"v7-full":        {fillBuild, ""},
	"v8-slow-served": {slowServedBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn"},
	"v6-late":        {goodBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn --fake-broken-while=/etc/sglprov/bad-gen"},
}

// pinArchive returns a .tar.gz of one pin's tree and its sha256.
func pinArchive(t *testing.T, pin string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	files := map[string]string{"app/build.sh": pins[pin][0], "app/flags": pins[pin][1] + "\n", "app/PIN": pin + "\n"}
	for _, name := range []string{"app/PIN", "app/build.sh", "app/flags"} {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

// genHost is a container set up for genRecipe, with every pin's archive under /srv.
type genHost struct {
	*host
	sums map[string]string
}

func newGenHost(t *testing.T, b binaries) *genHost {
	t.Helper()
	h := newHost(t, b)
	h.WriteFile(recipePath, []byte(genRecipe), 0o644)
	g := &genHost{host: h, sums: map[string]string{}}
	for pin := range pins {
		data, sum := pinArchive(t, pin)
		h.WriteFile("/srv/app-"+pin+".tar.gz", data, 0o644)
		g.sums[pin] = sum
	}
	return g
}

// applyPin runs apply with the pin's archive.
func (g *genHost) applyPin(pin string) applied {
	return g.apply("--set", "pin="+pin, "--set", "sha="+g.sums[pin])
}

// genDir is the recipe's generations folder in the container.
const genDir = "/opt/sglprov/generations/e2e-gen"

// current returns the generation the current link names.
func (g *genHost) current() string {
	g.t.Helper()
	target, err := os.Readlink(filepath.Join(g.Root, genDir, "current"))
	if err != nil {
		g.t.Fatalf("reading the current link: %v", err)
	}
	return target
}

// servingExe returns the executable of the service's main process (the fake server copied
// into a generation), "" when it does not run. Right after a start the main process may
// still be systemd's fork or the launcher's shell: it waits up to 10 s for the exec.
func (g *genHost) servingExe() string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := g.Run(10*time.Second, "sh", "-c", "p=$(systemctl show -p MainPID --value "+unitName+"); [ \"$p\" != 0 ] && readlink /proc/$p/exe")
		exe := strings.TrimSpace(out)
		if strings.HasSuffix(exe, "/fake-sglang") || time.Now().After(deadline) {
			return exe
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// catIn returns a file's content as the container sees it ("" when it is not there): /run
// and /tmp inside are the container's own mounts, not the root folder's.
func (g *genHost) catIn(path string) string {
	out, code := g.Run(10*time.Second, "cat", path)
	if code != 0 {
		return ""
	}
	return out
}

// waitActive waits for the unit to be active (after a boot).
func (g *genHost) waitActive(within time.Duration) {
	g.t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, _ := g.Run(10*time.Second, "systemctl", "is-active", unitName)
		if strings.TrimSpace(out) == "active" {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s not active within %s: %s\n%s", unitName, within, out, g.journal())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// gate runs the gate alone against the serving server; it fails the test unless it passes.
func (g *genHost) gate(what string) {
	g.t.Helper()
	out, code := g.Run(2*time.Minute, "sglprov", "smoke", "--url", "http://127.0.0.1:30000", "--ready-timeout", "60s")
	if code != 0 {
		g.t.Fatalf("%s: the gate on the serving server: exit %d\n%s\n%s", what, code, out, g.journal())
	}
}

// TestGenerations drives one node through the changes of its second day, against real
// systemd: a new pin whose gate fails (the previous generation's unit and tree come back
// and pass), a new pin whose build fails (the serving generation keeps serving through a
// restart and a reboot), a good new pin (the switch, its downtime measured, old
// generations pruned), and a kill -9 while a switch is being gated, then a reboot (the
// last generation that passed serves).
func TestGenerations(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)

	// v1: the first generation.
	a := g.applyPin("v1")
	if a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	exe1 := filepath.Join(genDir, gen1, "app/bin/fake-sglang")
	if got := g.servingExe(); got != exe1 {
		t.Fatalf("after v1 the server runs %q, want %q", got, exe1)
	}
	if !strings.Contains(a.out, "generation "+gen1[:12]+" serves") {
		t.Errorf("apply v1 does not say which generation serves:\n%s", a.out)
	}
	if out, _ := g.Run(time.Minute, "sglprov", "status", "--state-dir", stateDir); !strings.Contains(out, "generation "+gen1[:12]+" serves") {
		t.Errorf("status does not say which generation serves:\n%s", out)
	}

	t.Run("new pin whose gate fails: the previous generation serves again and passes", func(t *testing.T) {
		poll := startPoller(t, g.PID, 30000, nil)
		a := g.applyPin("v2-bad")
		seen := poll.finish()
		// Without a drain hook each candidate is gated on a side port: the served port
		// refuses connections while the candidates are tried, and never answers with one.
		t.Logf("failed switch v1 -> v2-bad: poller saw %d right, %d wrong (first %.40q), %d without an answer; longest gap between right answers %s",
			seen.Right, seen.Wrong, seen.FirstWrong, seen.Down, seen.LongestGap.Round(time.Millisecond))
		if seen.Wrong != 0 {
			t.Errorf("a failed switch without a drain hook served %d wrong answers on the served port (first %.80q), want none", seen.Wrong, seen.FirstWrong)
		}
		if seen.Right == 0 {
			t.Errorf("the poller got no right answer around the failed switch v1 -> v2-bad")
		}
		if a.code != 3 {
			t.Fatalf("apply v2-bad: exit %d, want 3\n%s", a.code, a.out)
		}
		for _, want := range []string{"failed the gate", "of generation " + gen1[:12] + " was restored and passed the gate again"} {
			if !strings.Contains(a.out, want) {
				t.Errorf("apply v2-bad does not say %q:\n%s", want, a.out)
			}
		}
		if got := g.servingExe(); got != exe1 {
			t.Errorf("after the failed gate the server runs %q, want generation 1's %q", got, exe1)
		}
		if unit := string(g.ReadFile(unitPath)); !strings.Contains(unit, filepath.Join(genDir, gen1)) {
			t.Errorf("the persistent unit does not point into generation 1:\n%s", unit)
		}
		if staged := g.catIn("/run/systemd/system.control/" + unitName); staged != "" {
			t.Errorf("the failed generation's staged unit is still in effect:\n%s", staged)
		}
		if g.current() != gen1 {
			t.Errorf("current -> %s after a failed gate, want %s", g.current(), gen1)
		}
		g.gate("after the failed gate")
	})

	t.Run("new pin whose build fails: the serving generation survives a restart and a reboot", func(t *testing.T) {
		a := g.applyPin("v3-fail")
		if a.code != 1 {
			t.Fatalf("apply v3-fail: exit %d, want 1\n%s", a.code, a.out)
		}
		if !strings.Contains(a.out, "generation "+gen1[:12]+" serves") {
			t.Errorf("apply v3-fail does not say that generation 1 serves:\n%s", a.out)
		}
		g.MustRun("systemctl", "restart", unitName)
		g.waitActive(30 * time.Second)
		if got := g.servingExe(); got != exe1 {
			t.Errorf("after systemctl restart the server runs %q, want %q", got, exe1)
		}
		g.gate("after systemctl restart")
		g.Reboot()
		g.waitActive(60 * time.Second)
		if got := g.servingExe(); got != exe1 {
			t.Errorf("after a reboot the server runs %q, want %q", got, exe1)
		}
		g.gate("after a reboot")
	})

	var gen4 string
	t.Run("good new pin switches, says what it kept and freed", func(t *testing.T) {
		poll := startPoller(t, g.PID, 30000, nil)
		a := g.applyPin("v4")
		seen := poll.finish()
		t.Logf("switch v1 -> v4: poller saw %d right, %d wrong, %d without an answer; longest gap between right answers %s",
			seen.Right, seen.Wrong, seen.Down, seen.LongestGap.Round(time.Millisecond))
		if seen.Wrong != 0 {
			t.Errorf("a good switch served %d wrong answers (first %.80q), want none", seen.Wrong, seen.FirstWrong)
		}
		if seen.Right == 0 {
			t.Errorf("the poller got no right answer during the switch v1 -> v4")
		}
		if a.code != 0 {
			t.Fatalf("apply v4: exit %d\n%s\n%s", a.code, a.out, g.journal())
		}
		gen4 = g.current()
		if gen4 == gen1 {
			t.Fatalf("v4 serves generation 1")
		}
		if got, want := g.servingExe(), filepath.Join(genDir, gen4, "app/bin/fake-sglang"); got != want {
			t.Errorf("after v4 the server runs %q, want %q", got, want)
		}
		rep := g.lastReport()
		if rep.Generation == nil || rep.Generation.Pruned == nil {
			t.Fatalf("the report says nothing of generations: %+v", rep.Generation)
		}
		p := rep.Generation.Pruned
		if strings.Join(p.Kept, ",") != gen4+","+gen1 {
			t.Errorf("kept %v, freed %+v (%d bytes); want v4 and v1 kept", p.Kept, p.Freed, p.Bytes)
		}
		// v2-bad and v3-fail, which never passed, went before the next builds.
		if entries, err := os.ReadDir(filepath.Join(g.Root, genDir)); err == nil {
			for _, e := range entries {
				if n := e.Name(); n != gen1 && n != gen4 && n != "current" && !strings.HasPrefix(n, ".") {
					t.Errorf("generation %s that never passed is still on disk", n)
				}
			}
		}
		for _, f := range p.Freed {
			if _, err := os.Stat(filepath.Join(g.Root, genDir, f.Key)); err == nil {
				t.Errorf("freed generation %s is still on disk", f.Key)
			}
		}
		if !strings.Contains(a.out, "freed") {
			t.Errorf("apply v4 does not say what it freed:\n%s", a.out)
		}
		// The downtime of the switch: from the service step's start (the old server is
		// stopped by the restart) to the end of the gate that passed.
		svc, gate := step(t, rep, "sglang-service"), step(t, rep, "smoke")
		down := gate.Started.Add(gate.Duration).Sub(svc.Started)
		t.Logf("switch v1 -> v4: downtime %s (service step %s, gate %s)", down.Round(time.Millisecond),
			svc.Duration.Round(time.Millisecond), gate.Duration.Round(time.Millisecond))
	})

	t.Run("kill -9 during the gate after a switch, then a reboot: the last good generation serves", func(t *testing.T) {
		if gen4 == "" {
			t.Skip("needs the v4 generation")
		}
		exe4 := filepath.Join(genDir, gen4, "app/bin/fake-sglang")
		g.MustRun("sh", "-c", "SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json setsid sglprov apply -f "+recipePath+
			" --state-dir "+stateDir+" --set pin=v5-slow --set sha="+g.sums["v5-slow"]+" >/tmp/apply.log 2>&1 & echo $! >/tmp/apply.pid")
		deadline := time.Now().Add(90 * time.Second)
		for {
			staged := g.catIn("/run/systemd/system.control/" + unitName)
			if staged != "" && !strings.Contains(staged, gen4) && strings.Contains(g.catIn("/tmp/apply.log"), "smoke gate") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the v5 switch never reached its gate:\n%s", g.catIn("/tmp/apply.log"))
			}
			time.Sleep(200 * time.Millisecond)
		}
		g.MustRun("sh", "-c", "kill -9 $(cat /tmp/apply.pid)")
		// The staged unit does not outlive the process that staged it: /etc's unit serves
		// again without a reboot.
		deadline = time.Now().Add(30 * time.Second)
		for g.servingExe() != exe4 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if got := g.servingExe(); got != exe4 {
			t.Errorf("after the kill the server runs %q, want the last generation that passed: %q", got, exe4)
		}
		g.Reboot()
		g.waitActive(60 * time.Second)
		if got := g.servingExe(); got != exe4 {
			t.Errorf("after the reboot the server runs %q, want the last generation that passed: %q", got, exe4)
		}
		g.gate("after the reboot")
		// The next apply of v4 builds nothing: its generation's records are kept.
		a := g.applyPin("v4")
		if a.code != 0 {
			t.Fatalf("apply v4 again: exit %d\n%s", a.code, a.out)
		}
		rep := g.lastReport()
		for _, name := range []string{"app-src", "app-build"} {
			if s := step(t, rep, name); s.Result != engine.ResultSkipped {
				t.Errorf("back to v4: %s %s (%s), want skipped", name, s.Result, s.Reason)
			}
		}
	})
}

// TestDaemonRollsBackToPreviousGeneration: a node that serves a second generation, whose
// server starts answering garbage in every profile, climbs the daemon's remediation ladder
// to the previous generation (restart, the whole gate and the other profile fail first),
// which serves again from its own folder, passes, and is recorded as the serving one.
func TestDaemonRollsBackToPreviousGeneration(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	if a := g.applyPin("v1"); a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	if a := g.applyPin("v6-late"); a.code != 0 {
		t.Fatalf("apply v6-late: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen6 := g.current()
	if gen6 == gen1 {
		t.Fatalf("v6-late serves generation %s, as v1 did", gen6)
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
	if got := g.current(); got != gen1 {
		t.Errorf("after the roll back the current link names %s, want %s", got, gen1)
	}
	if got, want := g.servingExe(), filepath.Join(genDir, gen1, "app/bin/fake-sglang"); got != want {
		t.Errorf("after the roll back the server runs %q, want %q", got, want)
	}
	g.gate("after the roll back")
}
