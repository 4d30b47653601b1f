package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
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
}
