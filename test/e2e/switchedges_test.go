package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// startApply starts `sglprov apply` of pin in the background inside the container (its
// own session, its output in /tmp/apply.log, its PID in /tmp/apply.pid), to be killed.
func (g *genHost) startApply(pin string) {
	g.t.Helper()
	g.MustRun("sh", "-c", "SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json setsid sglprov apply -f "+recipePath+
		" --state-dir "+stateDir+" --set pin="+pin+" --set sha="+g.sums[pin]+" >/tmp/apply.log 2>&1 & echo $! >/tmp/apply.pid")
}

// waitFor waits until cond holds, failing the test with what after within.
func (g *genHost) waitFor(what string, within time.Duration, cond func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			watcher, _ := g.Run(10*time.Second, "journalctl", "-u", "sglprov-unstage-sglang-e2e.service", "--no-pager", "-n", "20")
			g.t.Fatalf("%s: not within %s\napply log:\n%s\nthe staged unit's watcher:\n%s\n%s", what, within, g.catIn("/tmp/apply.log"), watcher, g.journal())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killApply kills the background apply with SIGKILL.
func (g *genHost) killApply() {
	g.t.Helper()
	g.MustRun("sh", "-c", "kill -9 $(cat /tmp/apply.pid)")
}

// TestKilledSideGateThenRestartServesWhatEtcHolds: a switch killed (kill -9) while its
// candidate is gated on a side port, with no daemon running, leaves no staged unit in
// effect: the unit in /etc serves again on the served port by itself, and the operator's
// `systemctl restart` restarts what /etc holds, never the staged candidate.
func TestKilledSideGateThenRestartServesWhatEtcHolds(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	if a := g.applyPin("v1"); a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	exe1 := filepath.Join(genDir, gen1, "app/bin/fake-sglang")
	staged := "/run/systemd/system.control/" + unitName

	poll := startPoller(t, g.PID, 30000, nil)
	// v5-slow never gets ready within the test: its side gate waits, and sglprov is killed.
	g.startApply("v5-slow")
	g.waitFor("the v5 candidate staged on a side port", 90*time.Second, func() bool {
		s := g.catIn(staged)
		return s != "" && !strings.Contains(s, gen1) && strings.Contains(g.catIn("/tmp/apply.log"), "candidate started on a side port")
	})
	g.killApply()
	// Nothing but systemd runs now: the staged unit goes, and /etc's unit serves again.
	g.waitFor("the staged unit dropped after the kill", 30*time.Second, func() bool { return g.catIn(staged) == "" })
	g.waitFor("generation 1 serving again after the kill", 30*time.Second, func() bool { return g.servingExe() == exe1 })
	g.MustRun("systemctl", "restart", unitName)
	g.waitActive(30 * time.Second)
	if got := g.servingExe(); got != exe1 {
		t.Errorf("after systemctl restart the server runs %q, want what /etc holds: %q", got, exe1)
	}
	g.gate("after systemctl restart")
	seen := poll.finish()
	t.Logf("killed side gate, then systemctl restart: poller saw %d right, %d wrong, %d without an answer; longest gap between right answers %s",
		seen.Right, seen.Wrong, seen.Down, seen.LongestGap.Round(time.Millisecond))
	if seen.Wrong != 0 {
		t.Errorf("the served port gave %d wrong answers (first %.80q), want none", seen.Wrong, seen.FirstWrong)
	}
	if unit := string(g.ReadFile(unitPath)); !strings.Contains(unit, filepath.Join(genDir, gen1)) {
		t.Errorf("the unit in /etc does not run generation 1:\n%s", unit)
	}
	// The next apply of v1 finds generation 1 serving and changes nothing.
	if a := g.applyPin("v1"); a.code != 0 {
		t.Fatalf("apply v1 after the kill: exit %d\n%s", a.code, a.out)
	}
	if got := g.servingExe(); got != exe1 {
		t.Errorf("at the end the server runs %q, want %q", got, exe1)
	}

	// Killed in the gate on the served port, after its side gate passed: the candidate
	// that passed only there does not come back with a restart.
	poll = startPoller(t, g.PID, 30000, nil)
	g.startApply("v8-slow-served")
	g.waitFor("the v8 candidate gated on the served port", 90*time.Second, func() bool {
		return strings.Contains(g.catIn("/tmp/apply.log"), "candidate passed on the side port, started on the served port")
	})
	g.killApply()
	g.waitFor("the staged unit dropped after the kill", 30*time.Second, func() bool { return g.catIn(staged) == "" })
	g.waitFor("generation 1 serving again after the kill", 30*time.Second, func() bool { return g.servingExe() == exe1 })
	g.MustRun("systemctl", "restart", unitName)
	g.waitActive(30 * time.Second)
	if got := g.servingExe(); got != exe1 {
		t.Errorf("after a kill in the served-port gate and systemctl restart the server runs %q, want %q", got, exe1)
	}
	g.gate("after a kill in the served-port gate and systemctl restart")
	seen = poll.finish()
	t.Logf("killed served-port gate, then systemctl restart: poller saw %d right, %d wrong, %d without an answer", seen.Right, seen.Wrong, seen.Down)
	if seen.Wrong != 0 {
		t.Errorf("the served port gave %d wrong answers (first %.80q), want none", seen.Wrong, seen.FirstWrong)
	}
}

// slowUndrainFlag makes hookedGenRecipe's undrain hook hang (a router that takes its time
// to put the node back), so that a test can kill sglprov in it.
const slowUndrainFlag = "/etc/sglprov/slow-undrain"

// hookedGenRecipe is genRecipe with drain hooks (drainedFile marks the node out of the
// router) and the given staging of its systemd step; the undrain hook hangs while
// slowUndrainFlag exists, after saying so in /tmp/undraining.
func hookedGenRecipe(stage string) string {
	r := strings.Replace(genRecipe, "      manager: systemd\n", "      manager: systemd\n      stage: "+stage+"\n", 1)
	return r + `
on_unhealthy: {argv: [/bin/sh, -c, "touch ` + drainedFile + `"]}
on_healthy: {argv: [/bin/sh, -c, "if [ -e ` + slowUndrainFlag + ` ]; then echo undraining >/tmp/undraining; sleep 120; fi; rm -f ` + drainedFile + `"], timeout: 5m}
`
}

// drainedInside reports whether the node is out of the router, as the container sees it.
func (g *genHost) drainedInside() bool {
	_, code := g.Run(10*time.Second, "test", "-e", drainedFile)
	return code == 0
}

// TestKillAfterPromoteKeepsTheServingGeneration: a good switch (side port, drain hooks)
// killed with SIGKILL in its undrain hook, after the promotion, then a reboot: the record
// names the generation /etc runs; `gc --dry-run` would not free it; the next apply, of a
// pin whose gate fails, frees nothing that serves, restores it, and it passes again (exit
// 3), serving at the end with no wrong answer.
func TestKillAfterPromoteKeepsTheServingGeneration(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	g.WriteFile(recipePath, []byte(hookedGenRecipe("port")), 0o644)
	if a := g.applyPin("v1"); a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()

	g.WriteFile(slowUndrainFlag, []byte("1\n"), 0o644)
	g.startApply("v4")
	g.waitFor("the v4 switch in its undrain hook", 2*time.Minute, func() bool { return g.catIn("/tmp/undraining") != "" })
	g.killApply()
	unit := string(g.ReadFile(unitPath))
	gen4 := genOf(unit)
	if gen4 == "" || gen4 == gen1 {
		t.Fatalf("the unit in /etc after the promotion runs %q (generation 1 is %s):\n%s", gen4, gen1, unit)
	}
	exe4 := filepath.Join(genDir, gen4, "app/bin/fake-sglang")
	if got := g.current(); got != gen4 {
		t.Errorf("after a kill in the undrain hook current -> %s, want the promoted %s", got, gen4)
	}
	g.MustRun("rm", "-f", slowUndrainFlag)
	g.Reboot()
	g.waitActive(60 * time.Second)
	if got := g.servingExe(); got != exe4 {
		t.Fatalf("after the reboot the server runs %q, want %q", got, exe4)
	}
	out, code := g.Run(time.Minute, "sglprov", "gc", "--dry-run", "--state-dir", stateDir)
	for _, line := range strings.Split(out, "\n") {
		if _, freed, ok := strings.Cut(line, "would free "); ok && strings.Contains(line, "generations of") && strings.Contains(freed, gen4[:12]) {
			t.Errorf("gc --dry-run would free the generation that serves: %s", line)
		}
	}
	if code != 0 {
		t.Errorf("gc --dry-run: exit %d\n%s", code, out)
	}
	t.Logf("gc --dry-run after the reboot:\n%s", out)

	poll := startPoller(t, g.PID, 30000, drainedIn(g.Root))
	a := g.applyPin("v2-bad")
	seen := poll.finish()
	t.Logf("bad pin after the kill: exit %d; poller saw %d right, %d wrong, %d without an answer, %d skipped while drained", a.code, seen.Right, seen.Wrong, seen.Down, seen.Drained)
	if a.code != 3 {
		t.Fatalf("apply v2-bad: exit %d, want 3\n%s\n%s", a.code, a.out, g.journal())
	}
	if !strings.Contains(a.out, "of generation "+gen4[:12]+" was restored and passed the gate again") {
		t.Errorf("apply v2-bad does not say that generation %s serves again:\n%s", gen4[:12], a.out)
	}
	if seen.Wrong != 0 {
		t.Errorf("the served port gave %d wrong answers (first %.80q), want none", seen.Wrong, seen.FirstWrong)
	}
	if _, err := os.Stat(filepath.Join(g.Root, genDir, gen4, "app/bin/server")); err != nil {
		t.Errorf("the serving generation's folder: %v", err)
	}
	if got := g.servingExe(); got != exe4 {
		t.Errorf("at the end the server runs %q, want %q", got, exe4)
	}
	if act, _ := g.Run(10*time.Second, "systemctl", "is-active", unitName); strings.TrimSpace(act) != "active" {
		t.Errorf("at the end %s is %s", unitName, act)
	}
	if g.drainedInside() {
		t.Errorf("at the end the node is still drained")
	}
	g.gate("at the end")
}

// genOf returns the generation of genDir a unit's text names ("" when none).
func genOf(unit string) string {
	_, rest, ok := strings.Cut(unit, genDir+"/")
	if !ok || len(rest) < 16 {
		return ""
	}
	return rest[:16]
}

// TestBackToTheServingPinBuildsNothing: after a new pin whose build fails, going back to
// the pin that serves reuses its generation as it is: nothing is built or written into it,
// nothing restarts, exit 0.
func TestBackToTheServingPinBuildsNothing(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	if a := g.applyPin("v1"); a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	exe1 := filepath.Join(genDir, gen1, "app/bin/fake-sglang")
	launcher := filepath.Join(g.Root, genDir, gen1, "app/bin/server")
	before, err := os.Stat(launcher)
	if err != nil {
		t.Fatal(err)
	}
	if a := g.applyPin("v3-fail"); a.code != 1 {
		t.Fatalf("apply v3-fail: exit %d, want 1\n%s", a.code, a.out)
	}
	pid := g.Show(unitName, "MainPID")["MainPID"]
	poll := startPoller(t, g.PID, 30000, nil)
	a := g.applyPin("v1")
	seen := poll.finish()
	t.Logf("back to v1: exit %d; poller saw %d right, %d wrong, %d without an answer", a.code, seen.Right, seen.Wrong, seen.Down)
	if a.code != 0 {
		t.Fatalf("apply v1 again: exit %d\n%s", a.code, a.out)
	}
	rep := g.lastReport()
	for _, name := range []string{"app-src", "app-build"} {
		if s := step(t, rep, name); s.Result != engine.ResultSkipped {
			t.Errorf("back to the serving pin: %s %s (%s), want skipped", name, s.Result, s.Reason)
		}
	}
	if strings.Contains(a.out, "dir="+genDir+"/"+gen1) && strings.Contains(a.out, "building") {
		t.Errorf("apply v1 builds in the serving generation:\n%s", a.out)
	}
	after, err := os.Stat(launcher)
	if err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the serving generation's launcher was rewritten (%v -> %v, %v)", before.ModTime(), after.ModTime(), err)
	}
	if now := g.Show(unitName, "MainPID")["MainPID"]; now != pid {
		t.Errorf("going back to the serving pin restarted the server (%s -> %s)", pid, now)
	}
	if seen.Wrong != 0 || seen.Down != 0 {
		t.Errorf("the served port gave %d wrong answers and %d failures, want none", seen.Wrong, seen.Down)
	}
	if got := g.servingExe(); got != exe1 {
		t.Errorf("at the end the server runs %q, want %q", got, exe1)
	}
}

// TestKilledDrainedSwitchIsUndrainedByTheNextRun: a switch that drained the node is killed
// (SIGKILL) while its candidate is gated, and the node rebooted: the node stays drained
// until the next sglprov run, whose gate passes, undrains it (exit 0), with no wrong answer
// to a router that honours the drain.
func TestKilledDrainedSwitchIsUndrainedByTheNextRun(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	g.WriteFile(recipePath, []byte(hookedGenRecipe("served")), 0o644)
	if a := g.applyPin("v1"); a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	exe1 := filepath.Join(genDir, gen1, "app/bin/fake-sglang")
	poll := startPoller(t, g.PID, 30000, drainedIn(g.Root))
	g.startApply("v5-slow")
	g.waitFor("the v5 switch drained the node and gates its candidate", 90*time.Second, func() bool {
		return g.drainedInside() && strings.Contains(g.catIn("/tmp/apply.log"), "smoke gate")
	})
	g.killApply()
	g.Reboot()
	g.waitActive(60 * time.Second)
	if got := g.servingExe(); got != exe1 {
		t.Errorf("after the reboot the server runs %q, want %q", got, exe1)
	}
	if !g.drainedInside() {
		t.Fatalf("the node is not drained after the killed switch: nothing to undrain")
	}
	if out := g.catIn(stateDir + "/undrain-owed/e2e-gen"); out == "" {
		t.Errorf("no record that the node is owed an undrain")
	}
	a := g.applyPin("v1")
	seen := poll.finish()
	t.Logf("killed drained switch, reboot, apply v1: exit %d; poller saw %d right, %d wrong, %d without an answer, %d skipped while drained", a.code, seen.Right, seen.Wrong, seen.Down, seen.Drained)
	if a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s", a.code, a.out)
	}
	if g.drainedInside() {
		t.Errorf("the next run whose gate passed left the node drained:\n%s", a.out)
	}
	if seen.Wrong != 0 {
		t.Errorf("the served port gave %d wrong answers (first %.80q), want none", seen.Wrong, seen.FirstWrong)
	}
	if got := g.servingExe(); got != exe1 {
		t.Errorf("at the end the server runs %q, want %q", got, exe1)
	}
}

// healthSample is one look at the node during a daemon's switch: whether the served port
// refused a connection just before and just after, and what /healthz answered between.
type healthSample struct {
	refusedBefore, refusedAfter bool
	code                        int
	body                        string
}

// TestHealthzFollowsTheServedPortDuringADaemonSwitch: the daemon switches to a new pin
// (staged on a side port, no drain hook: the served port refuses meanwhile). While the
// served port refuses, /healthz and /readyz answer 503 saying so and the metrics say a
// switch is in progress; never 200 while the port refuses; at the end the new generation
// serves, /healthz is 200, and the poller saw no wrong answer.
func TestHealthzFollowsTheServedPortDuringADaemonSwitch(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	g.WriteFile(recipePath, pinnedRecipe(g, "v1"), 0o644)
	if a := g.apply(); a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	g.MustRun("systemd-run", "--unit", daemonUnit, "--setenv=SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json",
		"/usr/local/bin/sglprov", "daemon", "-f", recipePath, "--state-dir", stateDir,
		"--interval", "1s", "--failures-before-restart", "1", "--canary-timeout", "60s",
		"--metrics-addr", "127.0.0.1:9477", "--textfile", textfilePath)
	d := &daemonHost{g.host}
	d.waitMetric(`sglprov_node_health\{recipe="e2e-gen",state="healthy"\} 1`, 2*time.Minute)

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialIn(ctx, g.PID, addr) }}}
	get := func(path string) (int, string) {
		resp, err := client.Get("http://127.0.0.1:9477" + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	refused := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := dialIn(ctx, g.PID, "127.0.0.1:30000")
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	}
	var samples []healthSample
	var readyz503, inProgress int
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			s := healthSample{refusedBefore: refused()}
			s.code, s.body = get("/healthz")
			s.refusedAfter = refused()
			if s.code == 503 && strings.Contains(s.body, "refuses connections") {
				if code, _ := get("/readyz"); code == 503 {
					readyz503++
				}
				if _, m := get("/metrics"); strings.Contains(m, `sglprov_switch_in_progress{recipe="e2e-gen"} 1`) {
					inProgress++
				}
			}
			samples = append(samples, s)
		}
	}()
	poll := startPoller(t, g.PID, 30000, nil)
	g.WriteFile(recipePath, pinnedRecipe(g, "v4"), 0o644)
	g.MustRun("systemctl", "kill", "-s", "HUP", daemonUnit)
	deadline := time.Now().Add(2 * time.Minute)
	for g.current() == gen1 && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	close(stop)
	<-done
	seen := poll.finish()
	if g.current() == gen1 {
		t.Fatalf("the daemon never switched to v4")
	}
	var ok200, switching503, lies int
	for _, s := range samples {
		switch {
		case s.code == 200 && s.refusedBefore && s.refusedAfter:
			lies++
			t.Errorf("/healthz answered 200 %q while the served port refused connections", s.body)
		case s.code == 200:
			ok200++
		case s.code == 503 && strings.Contains(s.body, "node_health=switching"):
			switching503++
		}
	}
	t.Logf("daemon switch v1 -> v4: %d looks at /healthz: %d 200, %d 503 (switching, the port refusing), %d 200 while the port refused; /readyz 503 %d times, switch_in_progress 1 %d times; poller saw %d right, %d wrong, %d without an answer",
		len(samples), ok200, switching503, lies, readyz503, inProgress, seen.Right, seen.Wrong, seen.Down)
	if switching503 == 0 || readyz503 == 0 || inProgress == 0 {
		t.Errorf("while the served port refused, /healthz said so %d times, /readyz %d times, the metrics %d times; want each at least once", switching503, readyz503, inProgress)
	}
	if seen.Wrong != 0 {
		t.Errorf("the served port gave %d wrong answers (first %.80q), want none", seen.Wrong, seen.FirstWrong)
	}
	gen4 := g.current()
	if got, want := g.servingExe(), filepath.Join(genDir, gen4, "app/bin/fake-sglang"); got != want {
		t.Errorf("at the end the server runs %q, want %q", got, want)
	}
	if code, body := get("/healthz"); code != 200 || strings.Contains(body, "switch") {
		t.Errorf("/healthz after the switch: %d %q, want 200", code, body)
	}
	g.gate("after the daemon's switch")
}
