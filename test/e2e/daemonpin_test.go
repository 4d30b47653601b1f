package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// pinnedRecipe is genRecipe with the pin and its digest written in the recipe itself, as a
// daemon's recipe file carries them (a SIGHUP re-reads the file; --set would stay).
func pinnedRecipe(g *genHost, pin string) []byte {
	r := strings.Replace(genRecipe, "  pin: v1\n", "  pin: "+pin+"\n", 1)
	r = strings.Replace(r, `  sha: ""`+"\n", `  sha: "`+g.sums[pin]+`"`+"\n", 1)
	return []byte(r)
}

// TestDaemonBadPinIsNotRetried: the daemon's recipe is changed to a pin whose gate fails
// and re-read (SIGHUP). The switch is tried once: the old generation serves again and
// passes, /healthz stays 200 and says that a change is pending and failed, the textfile
// says so too, the switch is not tried again while the recipe and the facts stay as they
// are, and the served port gives no wrong answer meanwhile.
func TestDaemonBadPinIsNotRetried(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	g.WriteFile(recipePath, pinnedRecipe(g, "v1"), 0o644)
	if a := g.apply(); a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	exe1 := genDir + "/" + gen1 + "/app/bin/fake-sglang"
	g.MustRun("systemd-run", "--unit", daemonUnit, "--setenv=SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json",
		"/usr/local/bin/sglprov", "daemon", "-f", recipePath, "--state-dir", stateDir,
		"--interval", "1s", "--failures-before-restart", "1", "--canary-timeout", "60s",
		"--metrics-addr", "127.0.0.1:9477", "--textfile", textfilePath)
	d := &daemonHost{g.host}
	d.waitMetric(`sglprov_node_health\{recipe="e2e-gen",state="healthy"\} 1`, 2*time.Minute)

	poll := startPoller(t, g.PID, 30000, nil)
	g.WriteFile(recipePath, pinnedRecipe(g, "v2-bad"), 0o644)
	g.MustRun("systemctl", "kill", "-s", "HUP", daemonUnit)
	d.waitMetric(`sglprov_switch_pending_failed\{recipe="e2e-gen"\} 1`, 3*time.Minute)
	// Twenty checks more at the 1 s interval: a retry would show as a second switch.
	time.Sleep(20 * time.Second)
	seen := poll.finish()
	t.Logf("bad pin under the daemon: poller saw %d right, %d wrong, %d without an answer; longest gap between right answers %s",
		seen.Right, seen.Wrong, seen.Down, seen.LongestGap.Round(time.Millisecond))

	journal, _ := g.Run(20*time.Second, "journalctl", "-u", daemonUnit, "--no-pager", "-o", "cat")
	switches := len(regexp.MustCompile(`the switch failed; what served before serves again`).FindAllString(journal, -1))
	if switches != 1 {
		t.Errorf("the failed switch was tried %d times, want once; journal of the daemon:\n%s", switches, journal)
	}
	if seen.Wrong != 0 {
		t.Errorf("the served port gave %d wrong answers (first %.80q) while the daemon tried the bad pin, want none", seen.Wrong, seen.FirstWrong)
	}
	code, body := d.get("/healthz")
	if code != 200 || !strings.Contains(body, "change pending") {
		t.Errorf("/healthz after the failed switch: %d %q, want 200 saying that a change is pending", code, body)
	}
	m := d.metrics()
	if !regexp.MustCompile(`sglprov_node_health\{recipe="e2e-gen",state="healthy"\} 1`).MatchString(m) {
		t.Errorf("the textfile does not say healthy after the failed switch:\n%s", m)
	}
	if got := g.servingExe(); got != exe1 {
		t.Errorf("after the failed switch the server runs %q, want generation 1's %q", got, exe1)
	}
	if g.current() != gen1 {
		t.Errorf("current -> %s after the failed switch, want %s", g.current(), gen1)
	}
	g.gate("after the failed switch under the daemon")

	// A new recipe is a new change: the good pin switches.
	g.WriteFile(recipePath, pinnedRecipe(g, "v4"), 0o644)
	g.MustRun("systemctl", "kill", "-s", "HUP", daemonUnit)
	d.waitMetric(`sglprov_switch_pending_failed\{recipe="e2e-gen"\} 0`, 3*time.Minute)
	deadline := time.Now().Add(2 * time.Minute)
	for g.current() == gen1 && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
	if g.current() == gen1 {
		t.Fatalf("the good pin after the bad one never switched")
	}
	g.gate("after the good pin under the daemon")
}
