package e2e

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestUnitNamesNotSglprovs runs under real systemd with an admin's backup.service in
// /etc/systemd/system and a system unit ssh.service in /usr/lib/systemd/system, both
// running. A recipe whose unit takes either name is refused by validate, plan and apply
// (exit 2, naming the file and the fix): nothing is written in /etc, and both units stay
// byte-identical and active. Records naming them (as an older sglprov wrote them) go with
// remove and gc, which stop, disable and delete neither.
func TestUnitNamesNotSglprovs(t *testing.T) {
	requireE2E(t)
	h := newHost(t, buildBinaries(t))
	units := map[string]struct {
		path string
		text []byte
		want string
	}{
		"backup.service": {"/etc/systemd/system/backup.service",
			[]byte("[Unit]\nDescription=nightly backup, written by an admin\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n"),
			"is not one sglprov rendered for recipe e2e-systemd"},
		"ssh.service": {"/usr/lib/systemd/system/ssh.service",
			[]byte("[Unit]\nDescription=the system's unit\n[Service]\nExecStart=/bin/sleep infinity\n"),
			"the system has a unit of that name (/lib/systemd/system/ssh.service)"},
	}
	for _, u := range units {
		h.WriteFile(u.path, u.text, 0o644)
	}
	h.MustRun("systemctl", "daemon-reload")
	h.MustRun("systemctl", "enable", "--now", "backup.service")
	h.MustRun("systemctl", "start", "ssh.service")
	intact := func(when string) {
		t.Helper()
		for name, u := range units {
			if got := h.ReadFile(u.path); !bytes.Equal(got, u.text) {
				t.Errorf("%s: %s changed:\n%s", when, u.path, got)
			}
			if out, _ := h.Run(10*time.Second, "systemctl", "is-active", name); strings.TrimSpace(out) != "active" {
				t.Errorf("%s: %s is %q, want active", when, name, strings.TrimSpace(out))
			}
		}
		if out, code := h.Run(10*time.Second, "test", "-e", "/etc/systemd/system/ssh.service"); code == 0 {
			t.Errorf("%s: a unit shadows the system's ssh.service: %s", when, out)
		}
	}
	for name, u := range units {
		h.WriteFile("/etc/sglprov/"+name+".yaml", []byte(strings.Replace(e2eRecipe, "unit: sglang-e2e.service", "unit: "+name, 1)), 0o644)
		for _, cmd := range []string{"validate", "plan", "apply"} {
			argv := []string{"SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json", "sglprov", cmd, "-f", "/etc/sglprov/" + name + ".yaml"}
			if cmd != "validate" {
				argv = append(argv, "--state-dir", stateDir)
			}
			out, code := h.Run(2*time.Minute, argv...)
			if code != 2 || !strings.Contains(out, u.want) || !strings.Contains(out, "choose another unit name") {
				t.Errorf("sglprov %s with unit %s: exit %d, want 2 saying %q and the fix\n%s", cmd, name, code, u.want, out)
			}
		}
	}
	intact("after validate, plan and apply")

	// Records that name them: the recipe's unit backup.service, and ssh.service that it
	// stopped naming; then both as what removed recipes left, for gc.
	h.WriteFile(stateDir+"/state.json", []byte(`{"version": 2, "recipes": {"e2e-systemd": {"steps": {}, "owns": [
  {"kind": "unit", "path": "backup.service", "step": "sglang-service", "manager": "systemd"}]}},
 "orphans": [{"kind": "unit", "path": "ssh.service", "manager": "systemd", "recipe": "e2e-systemd"}]}
`), 0o600)
	out := h.MustRun("SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json", "sglprov", "remove", "-f", recipePath, "--state-dir", stateDir)
	for _, want := range []string{"keep: unit backup.service: /etc/systemd/system/backup.service is not one sglprov rendered", "keep: unit ssh.service: no file of sglprov's is left", "removed e2e-systemd"} {
		if !strings.Contains(out, want) {
			t.Errorf("remove does not say %q:\n%s", want, out)
		}
	}
	intact("after remove")
	h.WriteFile(stateDir+"/state.json", []byte(`{"version": 2, "recipes": {}, "orphans": [
  {"kind": "unit", "path": "backup.service", "manager": "systemd", "recipe": "gone"},
  {"kind": "unit", "path": "ssh.service", "manager": "systemd", "recipe": "gone"}]}
`), 0o600)
	// gc stops no server it did not render: backup.service is active, so it is kept either
	// way; ssh.service has no file of sglprov's.
	out = h.MustRun("SGLPROV_GPU_FIXTURE=/etc/sglprov/gpu.json", "sglprov", "gc", "--state-dir", stateDir)
	for _, want := range []string{"keep: unit backup.service", "keep: unit ssh.service: no file of sglprov's is left"} {
		if !strings.Contains(out, want) {
			t.Errorf("gc does not say %q:\n%s", want, out)
		}
	}
	intact("after gc")
}
