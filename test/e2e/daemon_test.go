package e2e

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ladderRecipe is a node watched by the daemon under real systemd: two profiles whose
// server (the fake) answers garbage while a file exists (/etc/sglprov/bad-a for profile a,
// bad-b for b), and drain and undrain hooks that log to /var/log/sglprov-hooks.log.
const ladderRecipe = `apiVersion: sglprov/v1
name: e2e-ladder
requires:
  gpu: {min_count: 1}
on_unhealthy:
  argv: [/bin/sh, -c, 'echo "$SGLPROV_HOOK $SGLPROV_NODE_HEALTH $SGLPROV_RECIPE $SGLPROV_UNIT $SGLPROV_PROFILE" >> /var/log/sglprov-hooks.log']
on_healthy:
  argv: [/bin/sh, -c, 'echo "$SGLPROV_HOOK $SGLPROV_NODE_HEALTH $SGLPROV_RECIPE $SGLPROV_UNIT $SGLPROV_PROFILE" >> /var/log/sglprov-hooks.log']
profiles:
  a:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--fake-broken-while, /etc/sglprov/bad-a]
  b:
    match: {compute_capability: "12.0", quantization: modelopt_fp4}
    args: [--fake-broken-while, /etc/sglprov/bad-b]
steps:
  - name: sglang-service
    systemd:
      unit: sglang-e2e.service
      template: templates/sglang.service.tmpl
      manager: systemd
      needs_commands: []
      command: [/usr/local/bin/fake-sglang, -m, sglang.launch_server]
      model_path: /var/lib/sglprov/models/qwen
      port: "30000"
      profiles: [a, b]
      args: [--quantization, modelopt_fp4, --tp, "{{ .gpu.count }}"]
  - name: smoke
    needs: [sglang-service]
    smoke:
      url: "http://127.0.0.1:30000"
      ready_timeout: 60s
      cases:
        - {name: arithmetic, prompt: "What is 17 * 23? Answer with the number only.", expect: {regex: "\\b391\\b"}}
        - {name: prime, prompt: "Write a Python function to check if a number is prime. Be concise.", expect: {regex: "def \\w+\\("}}
`

const (
	textfilePath = "/var/lib/prometheus/node-exporter/sglprov.prom"
	hooksLog     = "/var/log/sglprov-hooks.log"
	daemonUnit   = "sglprov-daemon.service"
)

// daemonHost is a container whose sglprov daemon runs as a systemd unit (its stderr the
// journal's stream, as under the shipped unit).
type daemonHost struct {
	*host
}

func newDaemonHost(t *testing.T, b binaries) *daemonHost {
	t.Helper()
	h := newHost(t, b)
	h.WriteFile(recipePath, []byte(ladderRecipe), 0o644)
	h.MustRun("systemd-run", "--unit", daemonUnit, "--setenv=SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json",
		"/usr/local/bin/sglprov", "daemon", "-f", recipePath, "--state-dir", stateDir,
		"--interval", "1s", "--failures-before-restart", "1", "--canary-timeout", "60s",
		"--metrics-addr", "127.0.0.1:9477", "--textfile", textfilePath)
	return &daemonHost{h}
}

// metrics reads the daemon's textfile (empty while it has none).
func (d *daemonHost) metrics() string {
	out, _ := d.Run(10*time.Second, "cat", textfilePath)
	return out
}

// waitMetric waits until the textfile matches pattern.
func (d *daemonHost) waitMetric(pattern string, within time.Duration) string {
	d.t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		if last = d.metrics(); re.MatchString(last) {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
	out, _ := d.Run(20*time.Second, "journalctl", "-u", daemonUnit, "-n", "60", "--no-pager")
	d.t.Fatalf("the textfile never matched %q within %s; last:\n%s\njournal of the daemon:\n%s", pattern, within, last, out)
	return ""
}

// get asks the daemon's listener with bash's /dev/tcp (the container has no HTTP client):
// the status code and the body.
func (d *daemonHost) get(path string) (int, string) {
	d.t.Helper()
	out, _ := d.Run(20*time.Second, "bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/9477 && printf 'GET `+path+` HTTP/1.0\r\nHost: x\r\n\r\n' >&3 && cat <&3`)
	head, body, _ := strings.Cut(out, "\r\n\r\n")
	f := strings.Fields(head)
	if len(f) < 2 {
		d.t.Fatalf("GET %s: no HTTP answer: %q", path, out)
	}
	code, _ := strconv.Atoi(f[1])
	return code, body
}

func (d *daemonHost) hooks() []string {
	out, _ := d.Run(10*time.Second, "cat", hooksLog)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestDaemonLadder: the daemon under real systemd. A server that starts answering garbage
// climbs the ladder to the next profile and is healthy again with no manual step; with
// every rung failing /healthz is 503 and the drain hook ran once; fixing the cause brings
// 200 back and runs the undrain hook. The daemon's records reach the journal with their
// priority and fields.
func TestDaemonLadder(t *testing.T) {
	requireE2E(t)
	d := newDaemonHost(t, buildBinaries(t))
	d.waitMetric(`sglprov_node_health\{recipe="e2e-ladder",state="healthy"\} 1`, 2*time.Minute)
	if code, body := d.get("/readyz"); code != 200 {
		t.Errorf("/readyz after the first gate: %d %q", code, body)
	}
	if code, body := d.get("/healthz"); code != 200 || body != "ok node_health=healthy\n" {
		t.Errorf("/healthz healthy: %d %q", code, body)
	}
	if h := d.hooks(); len(h) != 1 || h[0] != "on_healthy healthy e2e-ladder sglang-e2e.service a" {
		t.Errorf("hooks after the first gate: %q", h)
	}
	if out, code := d.Run(time.Minute, "SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json", "sglprov", "apply", "-f", recipePath, "--state-dir", stateDir); code != 5 || !strings.Contains(out, "the sglprov daemon, pid ") {
		t.Errorf("an apply beside the daemon: exit %d\n%s", code, out)
	}

	// Profile a answers garbage: restart, the whole gate, then profile b, which passes.
	start := time.Now()
	d.MustRun("touch", "/etc/sglprov/bad-a")
	m := d.waitMetric(`sglprov_remediation_total\{recipe="e2e-ladder",result="ok",rung="next_profile"\} 1`, 3*time.Minute)
	m = d.waitMetric(`sglprov_node_health\{recipe="e2e-ladder",state="healthy"\} 1`, time.Minute)
	t.Logf("garbage to healthy on the next profile in %s", time.Since(start).Round(10*time.Millisecond))
	for _, w := range []string{
		`sglprov_remediation_total{recipe="e2e-ladder",result="ok",rung="restart"} 1`,
		`sglprov_remediation_total{recipe="e2e-ladder",result="failed",rung="regate"} 1`,
		`profile="b"`,
	} {
		if !strings.Contains(m, w) {
			t.Errorf("textfile lacks %s:\n%s", w, m)
		}
	}
	if unit := string(d.ReadFile(unitPath)); !strings.Contains(unit, "bad-b") {
		t.Errorf("the installed unit is not profile b's:\n%s", unit)
	}
	if code, _ := d.get("/healthz"); code != 200 {
		t.Errorf("/healthz on profile b: %d", code)
	}

	// Every rung fails: unhealthy, 503 with the reason, the drain hook once.
	d.MustRun("truncate", "-s", "0", hooksLog)
	d.MustRun("touch", "/etc/sglprov/bad-b")
	d.waitMetric(`sglprov_remediation_total\{recipe="e2e-ladder",result="ok",rung="give_up"\} 1`, 4*time.Minute)
	code, body := d.get("/healthz")
	if code != 503 || !strings.HasPrefix(body, "node_health=unhealthy: every rung of the remediation ladder failed") {
		t.Errorf("/healthz with every rung failing: %d %q", code, body)
	}
	if h := d.hooks(); len(h) != 1 || !strings.HasPrefix(h[0], "on_unhealthy ") {
		t.Errorf("hooks with every rung failing: %q, want the drain hook once", h)
	}
	if m := d.metrics(); !strings.Contains(m, `sglprov_remediation_total{recipe="e2e-ladder",result="skipped",rung="previous_generation"}`) {
		t.Errorf("the previous-generation rung is not counted as skipped:\n%s", m)
	}

	// The cause fixed on disk: a canary passes, 200, the undrain hook.
	d.MustRun("rm", "/etc/sglprov/bad-a", "/etc/sglprov/bad-b")
	d.waitMetric(`sglprov_node_health\{recipe="e2e-ladder",state="healthy"\} 1`, 2*time.Minute)
	if code, body := d.get("/healthz"); code != 200 {
		t.Errorf("/healthz after the fix: %d %q", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(d.hooks()) < 2 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if h := d.hooks(); len(h) != 2 || !strings.HasPrefix(h[1], "on_healthy healthy e2e-ladder") {
		t.Errorf("hooks after the fix: %q, want the drain hook then the undrain hook", h)
	}

	// The journal: the daemon's error has PRIORITY=3 and its fields.
	out := d.MustRun("journalctl", "-u", daemonUnit, "-o", "json", "--no-pager", "PRIORITY=3")
	found := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if strings.HasPrefix(asString(e["MESSAGE"]), "node unhealthy: every rung of the remediation ladder failed") &&
			e["RECIPE"] == "e2e-ladder" && e["RUNG"] == "give_up" && e["SYSLOG_IDENTIFIER"] == "sglprov" {
			found = true
		}
	}
	if !found {
		t.Errorf("no PRIORITY=3 journal entry with RECIPE and RUNG fields for the give-up:\n%s", out)
	}
	if out := d.MustRun("journalctl", "-u", daemonUnit, "-o", "json", "--no-pager", "PRIORITY=4", "RUNG=next_profile"); !strings.Contains(out, "remediation: trying the next candidate profile") {
		t.Errorf("no PRIORITY=4 journal entry for the next-profile rung:\n%s", out)
	}

	// Stopped: the last textfile says so.
	d.MustRun("systemctl", "stop", daemonUnit)
	m = d.metrics()
	for _, w := range []string{`sglprov_node_health{recipe="e2e-ladder",state="stopped"} 1`, "sglprov_daemon_up 0"} {
		if !strings.Contains(m, w) {
			t.Errorf("the textfile after the daemon stopped lacks %s:\n%s", w, m)
		}
	}
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}

// TestJournalPriorities: a one-shot apply run by systemd (its stderr the journal's stream)
// that the host refuses (exit 4) leaves its last word in the journal with PRIORITY=3 and
// the exit code and recipe as fields, not as PRIORITY=6 text; the refusal is recorded
// (status exits 4) and the textfile says so.
func TestJournalPriorities(t *testing.T) {
	requireE2E(t)
	h := newHost(t, buildBinaries(t))
	h.WriteFile("/etc/sglprov/big.yaml", []byte(`apiVersion: sglprov/v1
name: e2e-big
requires:
  gpu: {min_count: 64}
steps:
  - name: hello
    command: {argv: ["true"]}
`), 0o644)
	out, code := h.Run(2*time.Minute, "systemd-run", "--wait", "--unit", "sglprov-once", "--setenv=SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json",
		"/usr/local/bin/sglprov", "apply", "-f", "/etc/sglprov/big.yaml", "--state-dir", stateDir, "--textfile", textfilePath)
	if code == 0 {
		t.Fatalf("the refused apply's unit succeeded:\n%s", out)
	}
	j := h.MustRun("journalctl", "-u", "sglprov-once", "-o", "json", "--no-pager", "PRIORITY=3")
	found := false
	for _, line := range strings.Split(strings.TrimSpace(j), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil && e["EXIT_CODE"] == "4" && strings.HasPrefix(asString(e["MESSAGE"]), "sglprov apply failed") &&
			strings.Contains(asString(e["ERR"]), "this recipe needs at least 64") {
			found = true
		}
	}
	if !found {
		t.Errorf("no PRIORITY=3 entry with EXIT_CODE=4 and ERR for the refusal:\n%s", j)
	}
	if all := h.MustRun("journalctl", "-u", "sglprov-once", "-o", "cat", "--no-pager", "PRIORITY=6"); strings.Contains(all, "sglprov apply failed") {
		t.Errorf("the refusal also reached the journal at PRIORITY=6:\n%s", all)
	}
	out, code = h.Run(time.Minute, "sglprov", "status", "--state-dir", stateDir)
	if code != 4 || !strings.Contains(out, "refused before any step ran") {
		t.Errorf("status after the refusal: exit %d\n%s", code, out)
	}
	if m := string(h.ReadFile(textfilePath)); !strings.Contains(m, `sglprov_apply_refused{recipe="e2e-big"} 1`) || !strings.Contains(m, `sglprov_apply_exit_code{recipe="e2e-big"} 4`) {
		t.Errorf("the textfile after the refusal:\n%s", m)
	}
}
