package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPortHeldByForeignUnit: another unit (a server of another recipe, here the fake
// started with systemd-run) listens on the recipe's port. apply refuses before it writes
// or starts its unit, exit 5, naming the holder's pid and unit; once that unit is stopped,
// apply installs, starts and gates its own server.
func TestPortHeldByForeignUnit(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)
	h := newHost(t, bins)
	h.MustRun("systemd-run", "--unit=squatter.service", "/usr/local/bin/fake-sglang",
		"--model-path", "/var/lib/other/model", "--port", "30000", "--fake-port-file", "/var/lib/squatter.port")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(h.Root, "/var/lib/squatter.port")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			out, _ := h.Run(10*time.Second, "systemctl", "status", "squatter.service", "--no-pager")
			t.Fatalf("the squatter did not start listening:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid := strings.TrimSpace(h.Show("squatter.service", "MainPID")["MainPID"])

	a := h.apply()
	if a.code != 5 {
		t.Fatalf("apply beside the squatter: exit %d, want 5\n%s", a.code, a.out)
	}
	for _, want := range []string{"not starting " + unitName + ": port 30000 is held by pid " + pid + " (fake-sglang, unit squatter.service)",
		"stop it (systemctl disable --now squatter.service)"} {
		if !strings.Contains(a.out, want) {
			t.Errorf("apply's output lacks %q:\n%s", want, a.out)
		}
	}
	if _, err := os.Stat(filepath.Join(h.Root, unitPath)); !os.IsNotExist(err) {
		t.Errorf("the unit file was written although its port is held: %v", err)
	}
	if out, _ := h.Run(10*time.Second, "systemctl", "is-active", "squatter.service"); strings.TrimSpace(out) != "active" {
		t.Errorf("the squatter is %q after the refused apply, want active", strings.TrimSpace(out))
	}

	h.MustRun("systemctl", "stop", "squatter.service")
	h.mustApply()
	if out, code := h.Run(10*time.Second, "systemctl", "is-active", unitName); code != 0 || strings.TrimSpace(out) != "active" {
		t.Errorf("systemctl is-active %s = %q after the port was freed, want active", unitName, strings.TrimSpace(out))
	}
}
