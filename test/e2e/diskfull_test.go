package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDiskFullDuringANewGeneration fills the disk the generations live on with a new pin's
// build: the run fails naming `sglprov gc`, the serving generation keeps serving and
// passing the gate, and the next good pin builds, since the failed generation is freed
// before its build, and switches.
func TestDiskFullDuringANewGeneration(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	// The generations get a disk of their own, small enough for two generations of the
	// fake server and not three.
	g.MustRun("mkdir", "-p", "/opt/sglprov/generations")
	g.MustRun("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", "/opt/sglprov/generations")

	a := g.applyPin("v1")
	if a.code != 0 {
		t.Fatalf("apply v1: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := currentIn(g)
	exe1 := filepath.Join(genDir, gen1, "app/bin/fake-sglang")

	poll := startPoller(t, g.PID, 30000, nil)
	a = g.applyPin("v7-full")
	seen := poll.finish()
	t.Logf("disk full during v7-full: exit %d; poller saw %d right, %d wrong, %d without an answer", a.code, seen.Right, seen.Wrong, seen.Down)
	if a.code != 1 {
		t.Fatalf("apply v7-full: exit %d, want 1\n%s", a.code, a.out)
	}
	for _, want := range []string{"is full", "sglprov gc", "generation " + gen1[:12] + " serves"} {
		if !strings.Contains(a.out, want) {
			t.Errorf("apply v7-full does not say %q:\n%s", want, a.out)
		}
	}
	if seen.Wrong != 0 || seen.Down != 0 {
		t.Errorf("while the build filled the disk the served port gave %d wrong answers and %d failures, want none", seen.Wrong, seen.Down)
	}
	if got := g.servingExe(); got != exe1 {
		t.Errorf("after the failed build the server runs %q, want %q", got, exe1)
	}
	g.gate("after the disk filled up")
	// The message names what gc would really free: gc --dry-run's generations, the
	// half-built one among them.
	dry, code := g.Run(time.Minute, "sglprov", "gc", "--dry-run", "--state-dir", stateDir)
	t.Logf("gc --dry-run after v7-full: exit %d\n%s", code, dry)
	m := regexp.MustCompile(`sglprov gc\x60 would free (\S+ \S+) of generations \((\d+) of them: ([0-9a-f, ]+);`).FindStringSubmatch(a.out)
	if m == nil {
		t.Errorf("apply v7-full does not say what gc would free:\n%s", a.out)
	} else if want := "would free " + m[3] + " (" + m[1] + ")"; !strings.Contains(dry, want) {
		t.Errorf("apply v7-full says gc would free %s of %s generations (%s); gc --dry-run says otherwise (want %q):\n%s", m[1], m[2], m[3], want, dry)
	}
	if df, _ := g.Run(10*time.Second, "df", "-h", "/opt/sglprov/generations"); df != "" {
		t.Logf("after v7-full:\n%s", df)
	}

	a = g.applyPin("v4")
	if a.code != 0 {
		t.Fatalf("apply v4 after the disk filled up: exit %d, want 0 (the failed generation freed before the build)\n%s\n%s", a.code, a.out, g.journal())
	}
	if !strings.Contains(a.out, "freed") {
		t.Errorf("apply v4 does not say that it freed the failed generation:\n%s", a.out)
	}
	gen4 := currentIn(g)
	if gen4 == gen1 {
		t.Fatalf("current still names generation 1 after v4 passed")
	}
	if got, want := g.servingExe(), filepath.Join(genDir, gen4, "app/bin/fake-sglang"); got != want {
		t.Errorf("after v4 the server runs %q, want %q", got, want)
	}
	g.gate("after v4")
}

// currentIn returns the generation the current link names, read inside the container: its
// generations disk is a mount the root folder does not show.
func currentIn(g *genHost) string {
	g.t.Helper()
	out, code := g.Run(10*time.Second, "readlink", genDir+"/current")
	if code != 0 {
		g.t.Fatalf("reading the current link: exit %d: %s", code, out)
	}
	return strings.TrimSpace(out)
}
