package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// switchRecipe makes recipe NAME of e2eRecipe: its own unit and model, the same port.
func switchRecipe(name, unit, model, replaces string) string {
	r := strings.Replace(e2eRecipe, "name: e2e-systemd", "name: "+name+replaces, 1)
	r = strings.Replace(r, "unit: sglang-e2e.service", "unit: "+unit, 1)
	return strings.Replace(r, "/var/lib/sglprov/models/Qwen3.5-397B-A17B-NVFP4", "/var/lib/sglprov/models/"+model, 1)
}

// TestModelSwitch applies recipe B, which replaces recipe A, on a node that serves A,
// against real systemd: A's unit is stopped and disabled and B's serves B's model (exit 0);
// then B broken on a node that serves A: A serves again, B is stopped, exit 3.
func TestModelSwitch(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	const (
		recipeA = "/etc/sglprov/a.yaml"
		recipeB = "/etc/sglprov/b.yaml"
		unitA   = "sglang-a.service"
		unitB   = "sglang-b.service"
	)
	setup := func(t *testing.T) *host {
		h := newHost(t, bins)
		h.WriteFile(recipeA, []byte(switchRecipe("e2e-a", unitA, "model-A", "")+drainHooks), 0o644)
		h.WriteFile(recipeB, []byte(switchRecipe("e2e-b", unitB, "model-B", "\nreplaces: [e2e-a]")+drainHooks), 0o644)
		return h
	}
	apply := func(h *host, recipe string, extra ...string) applied {
		h.t.Helper()
		argv := append([]string{"SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json", "sglprov", "apply", "-f", recipe, "--state-dir", stateDir}, extra...)
		start := time.Now()
		out, code := h.Run(5*time.Minute, argv...)
		h.t.Logf("sglprov apply -f %s %s: exit %d in %s", recipe, strings.Join(extra, " "), code, time.Since(start).Round(10*time.Millisecond))
		return applied{out: out, code: code, took: time.Since(start)}
	}
	state := func(h *host, unit string) (active, enabled string) {
		a, _ := h.Run(10*time.Second, "systemctl", "is-active", unit)
		e, _ := h.Run(10*time.Second, "systemctl", "is-enabled", unit)
		return strings.TrimSpace(a), strings.TrimSpace(e)
	}
	serving := func(h *host, unit string) string {
		out, _ := h.Run(10*time.Second, "sh", "-c", "p=$(systemctl show -p MainPID --value "+unit+"); [ \"$p\" != 0 ] && tr '\\0' ' ' </proc/$p/cmdline")
		return out
	}

	t.Run("B replaces A", func(t *testing.T) {
		h := setup(t)
		if a := apply(h, recipeA); a.code != 0 {
			t.Fatalf("apply A: exit %d\n%s", a.code, a.out)
		}
		// A router that honours the drain hook: B's first profile answers "!!!!" on the port
		// while it is gated, and no request may reach it.
		poll := startPoller(t, h.PID, 30000, drainedIn(h.Root))
		a := apply(h, recipeB)
		seen := poll.finish()
		if a.code != 0 {
			t.Fatalf("apply B: exit %d\n%s", a.code, a.out)
		}
		t.Logf("switch A -> B: poller saw %d right, %d wrong, %d without an answer, %d polls skipped while drained; longest gap between right answers %s",
			seen.Right, seen.Wrong, seen.Down, seen.Drained, seen.LongestGap.Round(time.Millisecond))
		if seen.Wrong != 0 {
			t.Errorf("a good model switch served %d wrong answers to a router that honours the drain (first %.80q), want none", seen.Wrong, seen.FirstWrong)
		}
		if seen.Drained == 0 {
			t.Error("the switch never drained the node")
		}
		if _, err := os.Stat(filepath.Join(h.Root, drainedFile)); err == nil {
			t.Error("the node is still drained after the switch passed")
		}
		if act, en := state(h, unitA); act == "active" || en == "enabled" {
			t.Errorf("after B: %s is %s and %s, want stopped and disabled", unitA, act, en)
		}
		if act, en := state(h, unitB); act != "active" || en != "enabled" {
			t.Errorf("after B: %s is %s and %s, want active and enabled", unitB, act, en)
		}
		if cmd := serving(h, unitB); !strings.Contains(cmd, "/models/model-B") {
			t.Errorf("B's server runs %q, want B's model", cmd)
		}
		if !strings.Contains(a.out, "stopped and disabled a replaced unit") {
			t.Errorf("apply B does not say that it replaced %s:\n%s", unitA, a.out)
		}
	})

	t.Run("B broken: A serves again and the run exits 3", func(t *testing.T) {
		h := setup(t)
		if a := apply(h, recipeA); a.code != 0 {
			t.Fatalf("apply A: exit %d\n%s", a.code, a.out)
		}
		a := apply(h, recipeB, "--set", "also_broken_if=fp4-gemm-backend=flashinfer_cutlass")
		if a.code != 3 {
			t.Fatalf("apply broken B: exit %d, want 3\n%s", a.code, a.out)
		}
		if !strings.Contains(a.out, "what it replaced ("+unitA+") was restored and passed the gate again") {
			t.Errorf("apply broken B does not say that %s serves again:\n%s", unitA, a.out)
		}
		if act, en := state(h, unitA); act != "active" || en != "enabled" {
			t.Errorf("after broken B: %s is %s and %s, want active and enabled", unitA, act, en)
		}
		if act, _ := state(h, unitB); act == "active" {
			t.Errorf("after broken B: %s is still active", unitB)
		}
		if cmd := serving(h, unitA); !strings.Contains(cmd, "/models/model-A") {
			t.Errorf("A's server runs %q, want A's model", cmd)
		}
		// Back on A: A's own records are there, so its apply restarts nothing.
		before := h.Show(unitA, "MainPID")
		if a := apply(h, recipeA); a.code != 0 {
			t.Fatalf("apply A again: exit %d\n%s", a.code, a.out)
		}
		if after := h.Show(unitA, "MainPID"); after["MainPID"] != before["MainPID"] {
			t.Errorf("apply A after the failed switch restarted A (%s -> %s)", before["MainPID"], after["MainPID"])
		}
	})

	t.Run("kill -9 during B's gate, then a reboot: A serves", func(t *testing.T) {
		h := setup(t)
		if a := apply(h, recipeA); a.code != 0 {
			t.Fatalf("apply A: exit %d\n%s", a.code, a.out)
		}
		// B's server never gets ready: its gate waits, and sglprov is killed meanwhile.
		h.MustRun("sh", "-c", "SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json setsid sglprov apply -f "+recipeB+
			" --state-dir "+stateDir+" --set fake_mode=never-ready >/tmp/apply.log 2>&1 & echo $! >/tmp/apply.pid")
		deadline := time.Now().Add(90 * time.Second)
		for {
			log, _ := h.Run(10*time.Second, "cat", "/tmp/apply.log")
			if act, _ := state(h, unitB); act == "active" && strings.Contains(log, "smoke gate") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B's switch never reached its gate:\n%s", log)
			}
			time.Sleep(200 * time.Millisecond)
		}
		h.MustRun("sh", "-c", "kill -9 $(cat /tmp/apply.pid)")
		if _, en := state(h, unitA); en != "enabled" {
			t.Errorf("during B's gate %s is %s, want still enabled (B is staged for this boot only)", unitA, en)
		}
		h.Reboot()
		deadline = time.Now().Add(60 * time.Second)
		for {
			if act, _ := state(h, unitA); act == "active" {
				break
			}
			if time.Now().After(deadline) {
				act, en := state(h, unitA)
				t.Fatalf("after the reboot %s is %s and %s, want active", unitA, act, en)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if act, _ := state(h, unitB); act == "active" {
			t.Errorf("after the reboot %s runs, want only %s", unitB, unitA)
		}
		if cmd := serving(h, unitA); !strings.Contains(cmd, "/models/model-A") {
			t.Errorf("after the reboot A's server runs %q, want A's model", cmd)
		}
	})
}
