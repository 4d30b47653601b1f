package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestHarness proves the harness on its own: the container boots, systemd inside it loads
// a unit written under its root, starts it, reports it active and stops it.
func TestHarness(t *testing.T) {
	requireE2E(t)
	c := bootContainer(t)

	if err := checkBootRoot("/"); err == nil {
		t.Fatal("checkBootRoot accepted the host's root")
	}
	if got := strings.TrimSpace(c.MustRun("cat", "/etc/debian_version")); !strings.HasPrefix(got, "12") {
		t.Errorf("container's Debian version = %q, want 12.x (bookworm)", got)
	}

	c.WriteFile("/etc/systemd/system/e2e-hello.service", []byte(`[Unit]
Description=e2e harness self-test

[Service]
ExecStart=/bin/sleep infinity
`), 0o644)
	c.MustRun("systemctl", "daemon-reload")
	c.MustRun("systemctl", "start", "e2e-hello.service")
	if out, code := c.Run(10*time.Second, "systemctl", "is-active", "e2e-hello.service"); code != 0 || strings.TrimSpace(out) != "active" {
		t.Fatalf("e2e-hello.service after start: is-active = %q (exit %d)", strings.TrimSpace(out), code)
	}
	pid := c.Show("e2e-hello.service", "MainPID")["MainPID"]
	if pid == "" || pid == "0" {
		t.Errorf("e2e-hello.service MainPID = %q, want a running process", pid)
	}
	c.MustRun("systemctl", "stop", "e2e-hello.service")
	if out, _ := c.Run(10*time.Second, "systemctl", "is-active", "e2e-hello.service"); strings.TrimSpace(out) != "inactive" {
		t.Errorf("e2e-hello.service after stop: is-active = %q, want inactive", strings.TrimSpace(out))
	}
}
