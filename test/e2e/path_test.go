package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/service"
)

// Paths of the fake virtual environment and toolkit inside the container.
const (
	fakeVenvBin = "/opt/sglang/.venv/bin"
	fakeCUDA    = "/usr/local/cuda-13.0"
)

// pathRecipe serves the fake from a fake virtual environment, as the shipped recipes serve
// SGLang from theirs, with CUDA_HOME naming a fake toolkit and the default needs_commands
// (ninja and nvcc). extraEnv is added to the step's env (e.g. a PATH of its own).
func pathRecipe(extraEnv string) string {
	return `apiVersion: sglprov/v1
name: e2e-path
steps:
  - name: sglang-service
    systemd:
      unit: sglang-e2e.service
      template: templates/sglang.service.tmpl
      manager: systemd
      command: [` + fakeVenvBin + `/fake-sglang, -m, sglang.launch_server]
      model_path: /var/lib/sglprov/models/tiny
      env:
        CUDA_HOME: ` + fakeCUDA + `
        ` + extraEnv + `
`
}

// pathHost is a booted container with the fake server in a fake virtual environment, a
// fake ninja beside it, a fake nvcc in a fake toolkit, and pathRecipe(extraEnv).
func pathHost(t *testing.T, bins binaries, extraEnv string) *host {
	t.Helper()
	h := newHost(t, bins)
	h.CopyIn(bins.fake, fakeVenvBin+"/fake-sglang", 0o755)
	tool := []byte("#!/bin/sh\necho \"$0 $*\"\n")
	h.WriteFile(fakeVenvBin+"/ninja", tool, 0o755)
	h.WriteFile(fakeCUDA+"/bin/nvcc", tool, 0o755)
	h.WriteFile(recipePath, []byte(pathRecipe(extraEnv)), 0o644)
	return h
}

// TestServicePath drives the systemd step's check of the programs the server execs against
// real systemd: a unit whose PATH lacks the virtual environment is refused before anything
// is installed or started (exit 4, naming the unit, ninja and the fix); the unit sglprov
// renders carries the venv's bin and the toolkit's bin, and a process that systemd starts
// with that unit's Environment= finds both ninja and nvcc.
func TestServicePath(t *testing.T) {
	requireE2E(t)
	bins := buildBinaries(t)

	t.Run("a unit without the venv on PATH is refused before start", func(t *testing.T) {
		h := pathHost(t, bins, `PATH: "`+fakeCUDA+`/bin:/usr/bin:/bin"`)
		a := h.apply()
		if a.code != 4 {
			t.Fatalf("apply with a PATH that lacks the venv: exit %d, want 4\n%s", a.code, a.out)
		}
		rep := h.lastReport()
		msg := step(t, rep, "sglang-service").Error
		for _, want := range []string{"unit " + unitName, "runs ninja,", "pip install ninja", "needs_commands"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the refusal lacks %q: %s", want, msg)
			}
		}
		if _, code := h.Run(10*time.Second, "test", "-e", unitPath); code == 0 {
			t.Errorf("%s was installed although the step refused", unitPath)
		}
		if out, code := h.Run(10*time.Second, "systemctl", "is-active", unitName); code == 0 {
			t.Errorf("%s is %s after the refusal, want not started", unitName, strings.TrimSpace(out))
		}
	})

	t.Run("the rendered unit resolves ninja and nvcc", func(t *testing.T) {
		h := pathHost(t, bins, "")
		h.mustApply()
		if out, code := h.Run(10*time.Second, "systemctl", "is-active", unitName); code != 0 {
			t.Fatalf("%s is %s, want active\n%s", unitName, strings.TrimSpace(out), h.journal())
		}
		svc, err := service.ReadService(unitName, h.ReadFile(unitPath), "/var/cache")
		if err != nil {
			t.Fatal(err)
		}
		path := svc.Env["PATH"]
		if !strings.HasPrefix(path, fakeVenvBin+":"+fakeCUDA+"/bin:") {
			t.Errorf("unit PATH %q does not start with the venv's and the toolkit's bin", path)
		}
		// systemd itself starts a process with the unit's PATH and resolves both there.
		out := h.MustRun("systemd-run", "--quiet", "--wait", "--pipe", "--property=Environment=PATH="+path,
			"/bin/sh", "-c", "command -v ninja && command -v nvcc")
		want := fakeVenvBin + "/ninja\n" + fakeCUDA + "/bin/nvcc\n"
		if out != want {
			t.Errorf("under the unit's PATH, command -v ninja nvcc = %q, want %q", out, want)
		}
		// And the running server's own environment, as systemd gave it, has that PATH.
		pid := strings.TrimSpace(h.Show(unitName, "MainPID")["MainPID"])
		environ := h.MustRun("sh", "-c", "tr '\\0' '\\n' < /proc/"+pid+"/environ")
		if !strings.Contains("\n"+environ, "\nPATH="+path+"\n") {
			t.Errorf("the server (pid %s) runs without the unit's PATH %q:\n%s", pid, path, environ)
		}
	})
}
