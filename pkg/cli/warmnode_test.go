package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/test/ociregistry"
	"github.com/sglprov/sglprov/test/pyindex"
)

// warmRecipe: a venv and a pip step in the generation, the fake server (which compiles its
// kernels into the caches it is given when they are empty) and the gate. %s: the
// generations folder, python3, the index, the registry's repository, the fake server, the
// port twice.
const warmRecipe = `apiVersion: sglprov/v1
name: warm
generations: {dir: %q, keep: 2}
vars:
  push: "false"
cache:
  oci: %q
  push: "{{ .vars.push }}"
steps:
  - name: venv
    command: {argv: [%q, -m, venv, "{{ .generation.dir }}/venv"]}
  - name: deps
    needs: [venv]
    command:
      argv: ["{{ .generation.dir }}/venv/bin/python", -m, pip, install, --index-url, %q, alpha]
      env: {PIP_NO_CACHE_DIR: "1", PIP_CONFIG_FILE: /dev/null, PIP_DISABLE_PIP_VERSION_CHECK: "1"}
  - name: service
    needs: [deps]
    systemd:
      unit: sglang-warm.service
      manager: exec
      needs_commands: []
      command: [%q, -m, sglang.launch_server]
      model_path: /models/warm
      port: "%d"
      args: [--fake-compile-kernels]
  - name: smoke
    needs: [service]
    smoke:
      url: "http://127.0.0.1:%d"
      ready_timeout: 30s
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
`

// TestNodeBTakesEnvironmentAndKernelsFromTheFleetCache: node A (push: true) makes the
// generation's venv, installs from a real package index, starts the server, whose first
// start compiles its kernels into the generation's caches, and once the gate passed has
// pushed the environment and the kernel caches. The index is then stopped and node A's
// tree removed: node B's apply (pull only) makes no venv and runs no pip, unpacks the
// environment from the registry (its interpreter imports what node A installed), and its
// server starts with every kernel cache folder in the generation and the kernels in place
// (loaded, none compiled).
func TestNodeBTakesEnvironmentAndKernelsFromTheFleetCache(t *testing.T) {
	py := pyindex.NeedPip(t)
	reg := ociregistry.StartT(t)
	ix := pyindex.Start(t)
	alphaFile, alpha := pyindex.BuildWheel(t, "alpha", "1.0", "a1", "beta>=1.0")
	betaFile, beta := pyindex.BuildWheel(t, "beta", "1.0", "b1")
	ix.Publish("alpha", alphaFile, alpha)
	ix.Publish("beta", betaFile, beta)

	fake := filepath.Join(t.TempDir(), "fake-sglang")
	if out, err := exec.Command("go", "build", "-o", fake, "github.com/sglprov/sglprov/test/fakesglang/cmd/fake-sglang").CombinedOutput(); err != nil {
		t.Fatalf("building the fake server: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	gens := t.TempDir()
	recipe := writeRecipe(t, t.TempDir(), fmt.Sprintf(warmRecipe, gens, reg.Addr+"/fleet/warm", py, ix.URL(), fake, port, port))

	stA := filepath.Join(t.TempDir(), "st")
	code, out, errs := run(t, nil, "apply", "-f", recipe, "--state-dir", stA, "--set", "push=true")
	if code != 0 {
		t.Fatalf("node A's apply: %d\n%s\n%s", code, out, errs)
	}
	logA := serviceLog(t, stA)
	if !regexp.MustCompile(`kernel cache TRITON_CACHE_DIR=\S+/kernel-cache/triton \(1 files, compiled\)`).MatchString(logA) {
		t.Fatalf("node A's server did not compile into the generation's Triton cache:\n%s", logA)
	}
	for _, want := range []string{"pushed the Python environment", "pushed the kernel caches"} {
		if !strings.Contains(out+errs, want) {
			t.Errorf("node A's apply did not say %q:\n%s\n%s", want, out, errs)
		}
	}
	run(t, nil, "remove", "-f", recipe, "--state-dir", stA, "--yes")

	// Node B: no index, node A's generations gone, a state of its own.
	ix.Srv.Close()
	ents, _ := os.ReadDir(gens)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(gens, e.Name()))
	}
	stB := filepath.Join(t.TempDir(), "st")
	code, out, errs = run(t, nil, "apply", "-f", recipe, "--state-dir", stB)
	defer run(t, nil, "remove", "-f", recipe, "--state-dir", stB, "--yes")
	if code != 0 {
		t.Fatalf("node B's apply with no package index: %d\n%s\n%s", code, out, errs)
	}
	all := out + errs
	for _, want := range []string{"the venv is left to the Python steps", "unpacked the Python environment from the cache", "kernel caches taken from the cache"} {
		if !strings.Contains(all, want) {
			t.Errorf("node B's apply did not say %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "running command") {
		t.Errorf("node B ran a command (venv or pip):\n%s", all)
	}
	var pythons []string
	matches, _ := filepath.Glob(filepath.Join(gens, "warm", "*", "venv", "bin", "python"))
	for _, m := range matches {
		if !strings.Contains(m, "/current/") {
			pythons = append(pythons, m)
		}
	}
	if len(pythons) != 1 {
		t.Fatalf("node B's venv: %v", pythons)
	}
	got, err := exec.Command(pythons[0], "-c", "import alpha, beta; print(beta.V, beta.MARK)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "1.0 b1" {
		t.Errorf("node B's environment: %q %v", got, err)
	}
	logB := serviceLog(t, stB)
	for _, v := range []string{"TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TORCHINDUCTOR_CACHE_DIR", "DG_JIT_CACHE_DIR"} {
		if !regexp.MustCompile(`kernel cache ` + v + `=` + regexp.QuoteMeta(gens) + `/warm/[0-9a-f]+/kernel-cache/\S+ \(\d+ files, loaded\)`).MatchString(logB) {
			t.Errorf("node B's server was not given %s in the generation:\n%s", v, logB)
		}
	}
	if !strings.Contains(logB, "TRITON_CACHE_DIR") || strings.Contains(logB, "compiled") || !strings.Contains(logB, "(1 files, loaded)") {
		t.Errorf("node B's server compiled kernels, or found none:\n%s", logB)
	}
	run(t, nil, "remove", "-f", recipe, "--state-dir", stB, "--yes")

	// Node C: the environment artifact gone from the registry, the venv record still
	// there. Its venv step leaves the folder; the Python step finds no environment, makes
	// the venv with the venv step's argv and installs the lock's wheels from the registry.
	deleteManifests(t, "http://"+reg.Addr+"/v2/fleet/warm", "pyenv-")
	ents, _ = os.ReadDir(gens)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(gens, e.Name()))
	}
	stC := filepath.Join(t.TempDir(), "st")
	code, out, errs = run(t, nil, "apply", "-f", recipe, "--state-dir", stC)
	defer run(t, nil, "remove", "-f", recipe, "--state-dir", stC, "--yes")
	if code != 0 {
		t.Fatalf("node C's apply: %d\n%s\n%s", code, out, errs)
	}
	all = out + errs
	for _, want := range []string{"the venv is left to the Python steps", "making the venv that venv left to this step", "installed the Python lock from the cache"} {
		if !strings.Contains(all, want) {
			t.Errorf("node C's apply did not say %q:\n%s", want, all)
		}
	}
}

// deleteManifests deletes the manifests whose tags start with prefix (base:
// http://HOST/v2/REPO; the test registry allows deletes).
func deleteManifests(t *testing.T, base, prefix string) {
	t.Helper()
	resp, err := http.Get(base + "/tags/list")
	if err != nil {
		t.Fatal(err)
	}
	var tags struct {
		Tags []string `json:"tags"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tags)
	resp.Body.Close()
	n := 0
	for _, tag := range tags.Tags {
		if !strings.HasPrefix(tag, prefix) {
			continue
		}
		req, _ := http.NewRequest(http.MethodHead, base+"/manifests/"+tag, nil)
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		del, _ := http.NewRequest(http.MethodDelete, base+"/manifests/"+r.Header.Get("Docker-Content-Digest"), nil)
		d, err := http.DefaultClient.Do(del)
		if err != nil || d.StatusCode != http.StatusAccepted {
			t.Fatalf("deleting %s: %v %v", tag, err, d)
		}
		d.Body.Close()
		n++
	}
	if n == 0 {
		t.Fatalf("no tag %s* in %v", prefix, tags.Tags)
	}
}

// serviceLog reads the exec manager's log of the unit in the state dir.
func serviceLog(t *testing.T, state string) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(state, "*", "sglang-warm.service.log"))
	if len(logs) == 0 {
		logs, _ = filepath.Glob(filepath.Join(state, "*", "*", "sglang-warm.service.log"))
	}
	if len(logs) != 1 {
		filepath.Walk(state, func(p string, _ os.FileInfo, _ error) error { t.Log(p); return nil })
		t.Fatalf("the service's log in %s: %v", state, logs)
	}
	b, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
