package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/test/ociregistry"
	"github.com/sglprov/sglprov/test/pyindex"
)

// pyRecipe is a recipe with one Python step: pip install alpha from the index into the
// venv of python, with lock (when not "") as its python.lock.
func pyRecipe(python, index, lock string) string {
	s := fmt.Sprintf(`apiVersion: sglprov/v1
name: pyt
steps:
  - name: deps
    command:
      argv: [%q, -m, pip, install, --index-url, %q, alpha]
      env: {PIP_NO_CACHE_DIR: "1", PIP_CONFIG_FILE: /dev/null, PIP_DISABLE_PIP_VERSION_CHECK: "1"}
`, python, index)
	if lock != "" {
		s += "python: {lock: " + lock + "}\n"
	}
	return s
}

// TestLockCommandAndLockedApply: node A's apply runs a pip step against a real package
// index; `sglprov pylock` writes the lock of what it installed (the wheels' sha256s as the
// index served them) next to the recipe. A newer beta is published; node B, whose recipe
// names the lock, installs the locked beta 1.0, and a wheel at the locked URL with other
// bytes fails the step with both digests named.
func TestLockCommandAndLockedApply(t *testing.T) {
	py := pyindex.NeedPip(t)
	ix := pyindex.Start(t)
	alphaFile, alpha := pyindex.BuildWheel(t, "alpha", "1.0", "a1", "beta>=1.0")
	betaFile, beta := pyindex.BuildWheel(t, "beta", "1.0", "b1")
	ix.Publish("alpha", alphaFile, alpha)
	ix.Publish("beta", betaFile, beta)

	a := t.TempDir()
	pyA, _ := pyindex.Venv(t, py, filepath.Join(a, "venv"))
	recipeA := writeRecipe(t, a, pyRecipe(pyA, ix.URL(), ""))
	stA := filepath.Join(a, "st")
	if code, out, errs := run(t, nil, "apply", "-f", recipeA, "--state-dir", stA); code != 0 {
		t.Fatalf("node A's apply: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := run(t, nil, "lock", "-f", recipeA, "--state-dir", stA)
	if code != 0 || !strings.Contains(out, "2 packages from wheels") {
		t.Fatalf("lock: %d\n%s\n%s", code, out, errs)
	}
	lockA := filepath.Join(a, "pyt.lock.json")
	// A file of the user's under the name asked for is left as it is.
	mine := filepath.Join(a, "notes.json")
	if err := os.WriteFile(mine, []byte(`{"mine": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, nil, "lock", "-f", recipeA, "--state-dir", stA, "-o", mine); code != 2 || !strings.Contains(errs, "not replacing it") {
		t.Errorf("lock -o over a file that is no lock: %d %s", code, errs)
	}
	if b, _ := os.ReadFile(mine); string(b) != `{"mine": true}` {
		t.Errorf("the user's file was changed: %s", b)
	}
	l, err := pylock.Read(lockA)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"alpha": pyindex.SHA256(alpha), "beta": pyindex.SHA256(beta)}
	for _, p := range l.Packages {
		if p.SHA256 != want[p.Name] {
			t.Errorf("locked %s with sha256 %s, want %s", p.Name, p.SHA256, want[p.Name])
		}
	}
	if len(l.Packages) != 2 {
		t.Errorf("locked %+v, want alpha and beta", l.Packages)
	}

	// A newer beta; node B's recipe names the lock.
	beta2File, beta2 := pyindex.BuildWheel(t, "beta", "2.0", "b2")
	ix.Publish("beta", beta2File, beta2)
	b := t.TempDir()
	lockBytes, _ := os.ReadFile(lockA)
	if err := os.WriteFile(filepath.Join(b, "py.lock.json"), lockBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	pyB, _ := pyindex.Venv(t, py, filepath.Join(b, "venv"))
	recipeB := writeRecipe(t, b, pyRecipe(pyB, ix.URL(), "py.lock.json"))
	stB := filepath.Join(b, "st")
	if code, out, errs := run(t, nil, "apply", "-f", recipeB, "--state-dir", stB); code != 0 {
		t.Fatalf("node B's locked apply: %d\n%s\n%s", code, out, errs)
	}
	got, err := exec.Command(pyB, "-c", "import beta; print(beta.V, beta.MARK)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "1.0 b1" {
		t.Errorf("node B has beta %q (%v), want the locked 1.0, not the newer 2.0", got, err)
	}
	// The locked step's fingerprint is the lock's digest: plan says so when it changes.
	if code, out, _ := run(t, nil, "plan", "-f", recipeB, "--state-dir", stB); code != 0 || !strings.Contains(out, "unchanged") {
		t.Errorf("plan after the locked apply: %d\n%s", code, out)
	}

	// Other bytes under the locked wheel's URL: refused, both digests named.
	_, other := pyindex.BuildWheel(t, "beta", "1.0", "tampered")
	ix.Publish("beta", betaFile, other)
	c := t.TempDir()
	if err := os.WriteFile(filepath.Join(c, "py.lock.json"), lockBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	pyC, _ := pyindex.Venv(t, py, filepath.Join(c, "venv"))
	recipeC := writeRecipe(t, c, pyRecipe(pyC, ix.URL(), "py.lock.json"))
	code, out, errs = run(t, nil, "apply", "-f", recipeC, "--state-dir", filepath.Join(c, "st"))
	if code != 1 || !strings.Contains(out+errs, pyindex.SHA256(beta)) || !strings.Contains(out+errs, pyindex.SHA256(other)) {
		t.Errorf("apply with a wheel that differs from the lock: %d; want 1 and both digests (%s, %s)\n%s\n%s", code, pyindex.SHA256(beta), pyindex.SHA256(other), out, errs)
	}
}

// TestLockWithoutPythonSteps: a recipe with a pip step that has not run here is a usage
// error that says to apply it first; one with no pip step at all says so, and what to add.
func TestLockWithoutPythonSteps(t *testing.T) {
	dir := t.TempDir()
	recipe := writeRecipe(t, dir, "apiVersion: sglprov/v1\nname: np\nsteps:\n  - name: x\n    command: {argv: [python3, -m, pip, install, six]}\n")
	code, _, errs := run(t, nil, "lock", "-f", recipe, "--state-dir", filepath.Join(dir, "st"))
	if code != 2 || !strings.Contains(errs, "no Python step") || !strings.Contains(errs, "sglprov apply -f") {
		t.Errorf("lock with no Python step run: %d %s", code, errs)
	}
	recipe = writeRecipe(t, dir, "apiVersion: sglprov/v1\nname: np\nsteps:\n  - name: x\n    command: {argv: [\"true\"]}\n")
	code, _, errs = run(t, nil, "lock", "-f", recipe, "--state-dir", filepath.Join(dir, "st"))
	if code != 2 || !strings.Contains(errs, "recipe np ("+recipe+") has no Python step to lock") || strings.Contains(errs, "sglprov apply") {
		t.Errorf("lock of a recipe with no pip step: %d %s", code, errs)
	}
}

// TestPythonStepsThroughTheFleetCache: with cache: and no lock file, node A (push: true)
// runs its pip step against the index and publishes the lock of what it installed, with
// the wheels, to the real registry, tagged with the step's fingerprint. A newer beta is
// then published and the index stopped: node B, with the same recipe (a venv at the same
// path) and a pull-only cache, installs the locked older beta from the registry alone.
func TestPythonStepsThroughTheFleetCache(t *testing.T) {
	py := pyindex.NeedPip(t)
	reg := ociregistry.StartT(t)
	ix := pyindex.Start(t)
	alphaFile, alpha := pyindex.BuildWheel(t, "alpha", "1.0", "a1", "beta>=1.0")
	betaFile, beta := pyindex.BuildWheel(t, "beta", "1.0", "b1")
	ix.Publish("alpha", alphaFile, alpha)
	ix.Publish("beta", betaFile, beta)

	work := t.TempDir()
	venvPath := filepath.Join(work, "venv")
	python, _ := pyindex.Venv(t, py, venvPath)
	recipe := func(push bool) string {
		return pyRecipe(python, ix.URL(), "") + fmt.Sprintf("cache: {oci: %q, push: %q}\n", reg.Addr+"/fleet/py", fmt.Sprint(push))
	}
	a := t.TempDir()
	code, out, errs := run(t, nil, "apply", "-f", writeRecipe(t, a, recipe(true)), "--state-dir", filepath.Join(a, "st"))
	if code != 0 {
		t.Fatalf("node A's apply: %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out+errs, "pushed to the cache") {
		t.Errorf("node A did not push its lock:\n%s\n%s", out, errs)
	}
	// The one tag is the step's lock, and its manifest says which recipe and step made it.
	m := manifestOfOnlyTag(t, "http://"+reg.Addr+"/v2/fleet/py")
	if m.ArtifactType != pylock.Kind || m.Annotations["org.sglprov.recipe"] != "pyt" || m.Annotations["org.sglprov.step"] != "deps" {
		t.Errorf("the pushed manifest: type %q, annotations %v; want %s by recipe pyt, step deps", m.ArtifactType, m.Annotations, pylock.Kind)
	}

	// A newer beta, then no index at all; node B's venv at the same path.
	beta2File, beta2 := pyindex.BuildWheel(t, "beta", "2.0", "b2")
	ix.Publish("beta", beta2File, beta2)
	ix.Srv.Close()
	if err := os.Rename(venvPath, venvPath+".a"); err != nil {
		t.Fatal(err)
	}
	pyindex.Venv(t, py, venvPath)
	b := t.TempDir()
	code, out, errs = run(t, nil, "apply", "-f", writeRecipe(t, b, recipe(false)), "--state-dir", filepath.Join(b, "st"))
	if code != 0 {
		t.Fatalf("node B's apply with the index stopped: %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "from cache") {
		t.Errorf("node B's step did not say it came from the cache:\n%s", out)
	}
	got, err := exec.Command(python, "-c", "import beta; print(beta.V, beta.MARK)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "1.0 b1" {
		t.Errorf("node B has beta %q (%v), want node A's 1.0, not the newer 2.0", got, err)
	}
}

type ociManifest struct {
	ArtifactType string            `json:"artifactType"`
	Annotations  map[string]string `json:"annotations"`
}

// manifestOfOnlyTag reads the manifest of the one tag of the repository at base.
func manifestOfOnlyTag(t *testing.T, base string) ociManifest {
	t.Helper()
	get := func(url string, v any) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	var tags struct {
		Tags []string `json:"tags"`
	}
	get(base+"/tags/list", &tags)
	// The environment a Python step left travels beside its lock (pyenv.Tag).
	tags.Tags = slices.DeleteFunc(tags.Tags, func(s string) bool { return strings.HasPrefix(s, "pyenv-") })
	if len(tags.Tags) != 1 {
		t.Fatalf("tags %v, want one", tags.Tags)
	}
	var m ociManifest
	get(base+"/manifests/"+tags.Tags[0], &m)
	return m
}

// TestLockedRecipeThroughTheFleetCache: with python.lock and cache:, the pushing node
// installs the lock from the index and publishes it with its wheels; with the index
// stopped, another node installs the same lock from the registry's wheels.
func TestLockedRecipeThroughTheFleetCache(t *testing.T) {
	py := pyindex.NeedPip(t)
	reg := ociregistry.StartT(t)
	ix := pyindex.Start(t)
	alphaFile, alpha := pyindex.BuildWheel(t, "alpha", "1.0", "a1", "beta>=1.0")
	betaFile, beta := pyindex.BuildWheel(t, "beta", "1.0", "b1")
	ix.Publish("alpha", alphaFile, alpha)
	ix.Publish("beta", betaFile, beta)
	lock := &pylock.Lock{Version: pylock.Version, Packages: []pylock.Package{
		{Name: "alpha", Version: "1.0", Wheel: alphaFile, SHA256: pyindex.SHA256(alpha), URL: ix.Srv.URL + "/files/" + alphaFile},
		{Name: "beta", Version: "1.0", Wheel: betaFile, SHA256: pyindex.SHA256(beta), URL: ix.Srv.URL + "/files/" + betaFile},
	}}
	work := t.TempDir()
	venvPath := filepath.Join(work, "venv")
	python, _ := pyindex.Venv(t, py, venvPath)
	node := func(push bool) (int, string, string) {
		d := t.TempDir()
		if err := pylock.Write(filepath.Join(d, "py.lock.json"), lock); err != nil {
			t.Fatal(err)
		}
		r := pyRecipe(python, ix.URL(), "py.lock.json") + fmt.Sprintf("cache: {oci: %q, push: %q}\n", reg.Addr+"/fleet/locked", fmt.Sprint(push))
		return run(t, nil, "apply", "-f", writeRecipe(t, d, r), "--state-dir", filepath.Join(d, "st"))
	}
	if code, out, errs := node(true); code != 0 || !strings.Contains(out+errs, "pushed to the cache") {
		t.Fatalf("the pushing node: %d\n%s\n%s", code, out, errs)
	}
	ix.Srv.Close()
	if err := os.Rename(venvPath, venvPath+".a"); err != nil {
		t.Fatal(err)
	}
	pyindex.Venv(t, py, venvPath)
	code, out, errs := node(false)
	if code != 0 || !strings.Contains(out, "from cache") {
		t.Fatalf("the other node, index stopped: %d\n%s\n%s", code, out, errs)
	}
	if got, err := exec.Command(python, "-c", "import beta; print(beta.V, beta.MARK)").CombinedOutput(); err != nil || strings.TrimSpace(string(got)) != "1.0 b1" {
		t.Errorf("beta %q (%v), want the locked 1.0", got, err)
	}
}

// TestLockFileFIFORefusedAtOnce: a recipe whose python.lock is a FIFO is refused by
// validate and plan at once (exit 2, the FIFO named), never waited on: no writer ever
// opens it, and the process ends without needing a signal.
func TestLockFileFIFORefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "py.lock.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	recipe := writeRecipe(t, dir, pyRecipe("/usr/bin/python3", "http://127.0.0.1:9/simple/", "py.lock.json"))
	for _, cmdName := range []string{"validate", "plan"} {
		cmd := exec.Command(os.Args[0], cmdName, "-f", recipe, "--state-dir", filepath.Join(dir, "st"))
		cmd.Env = []string{mainEnv + "=1", "PATH=/usr/bin:/bin"}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
				t.Errorf("%s waited on the FIFO until SIGTERM\n%s", cmdName, out.String())
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Errorf("%s waited on the FIFO and outlived SIGTERM by 5 s\n%s", cmdName, out.String())
			}
			continue
		}
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(out.String(), "FIFO") || !strings.Contains(out.String(), "py.lock.json") {
			t.Errorf("%s with a FIFO as python.lock: exit %d; want 2 and the FIFO named\n%s", cmdName, code, out.String())
		}
	}
}

// TestLockRefusesWhatItCannotLock: after a real pip install from the index, `sglprov
// pylock` refuses an environment where beta's dist-info is a symbolic link (Python still
// finds beta installed through it) and one holding a distribution whose METADATA names
// the project "a -r /etc/passwd", naming each; it writes no lock that leaves beta out or
// carries the forged name.
func TestLockRefusesWhatItCannotLock(t *testing.T) {
	py := pyindex.NeedPip(t)
	ix := pyindex.Start(t)
	alphaFile, alpha := pyindex.BuildWheel(t, "alpha", "1.0", "a1", "beta>=1.0")
	betaFile, beta := pyindex.BuildWheel(t, "beta", "1.0", "b1")
	ix.Publish("alpha", alphaFile, alpha)
	ix.Publish("beta", betaFile, beta)
	a := t.TempDir()
	python, site := pyindex.Venv(t, py, filepath.Join(a, "venv"))
	recipe := writeRecipe(t, a, pyRecipe(python, ix.URL(), ""))
	st := filepath.Join(a, "st")
	if code, out, errs := run(t, nil, "apply", "-f", recipe, "--state-dir", st); code != 0 {
		t.Fatalf("apply: %d\n%s\n%s", code, out, errs)
	}
	lockFile := filepath.Join(a, "pyt.lock.json")

	// beta's dist-info moved out and linked back.
	di := filepath.Join(site, "beta-1.0.dist-info")
	moved := filepath.Join(a, "beta-1.0.dist-info")
	if err := os.Rename(di, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, di); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(python, "-c", "import importlib.metadata as m; print(m.version('beta'))").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "1.0" {
		t.Fatalf("Python does not see beta through the link: %v %s", err, out)
	}
	code, out, errs := run(t, nil, "lock", "-f", recipe, "--state-dir", st)
	if code == 0 || !strings.Contains(errs, di) || !strings.Contains(errs, "symbolic link") {
		t.Errorf("lock with beta's dist-info a link: %d; want a refusal naming %s\n%s\n%s", code, di, out, errs)
	}
	if _, err := os.Stat(lockFile); err == nil {
		b, _ := os.ReadFile(lockFile)
		t.Errorf("a lock was written without beta:\n%s", b)
	}
	os.Remove(di)
	if err := os.Rename(moved, di); err != nil {
		t.Fatal(err)
	}

	// A forged distribution whose name carries a pip option.
	forged := filepath.Join(site, "a-1.dist-info")
	if err := os.MkdirAll(forged, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(forged, "METADATA"), []byte("Metadata-Version: 2.1\nName: a -r /etc/passwd\nVersion: 1\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run(t, nil, "lock", "-f", recipe, "--state-dir", st)
	if code == 0 || !strings.Contains(errs, forged) || !strings.Contains(errs, `"a -r /etc/passwd" is no project name`) {
		t.Errorf("lock with a forged name: %d; want a refusal naming %s\n%s\n%s", code, forged, out, errs)
	}
	if _, err := os.Stat(lockFile); err == nil {
		b, _ := os.ReadFile(lockFile)
		t.Errorf("a lock was written with the forged name:\n%s", b)
	}
	// Removed, the environment locks whole.
	if err := os.RemoveAll(forged); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, nil, "lock", "-f", recipe, "--state-dir", st); code != 0 || !strings.Contains(out, "2 packages from wheels") {
		t.Errorf("lock of the repaired environment: %d\n%s\n%s", code, out, errs)
	}
}

// TestLockedApplyRefusesWhatTheLockDoesNotSay: a locked recipe whose lock smuggles a
// second requirement into a url (evil @ URL after a newline) is refused before pip runs
// (exit 2, the url named) and evil is never installed; one whose alpha 1.0 entry is
// consistent but whose wheel, as the index serves it, is alpha 2.0 fails its step (exit 1)
// naming both versions: the environment after the install is compared with the lock.
func TestLockedApplyRefusesWhatTheLockDoesNotSay(t *testing.T) {
	py := pyindex.NeedPip(t)
	ix := pyindex.Start(t)
	a1File, _ := pyindex.BuildWheel(t, "alpha", "1.0", "a1")
	_, a2 := pyindex.BuildWheel(t, "alpha", "2.0", "a2")
	evilFile, evil := pyindex.BuildWheel(t, "evil", "6.6.6", "evil")
	ix.Publish("alpha", a1File, a2) // 2.0's bytes under 1.0's name
	ix.Publish("evil", evilFile, evil)
	files := ix.Srv.URL + "/files/"
	h2, he := pyindex.SHA256(a2), pyindex.SHA256(evil)
	for _, c := range []struct {
		name, url string
		code      int
		want      []string
	}{
		{"smuggled", files + a1File + " --hash=sha256:" + h2 + "\nevil @ " + files + evilFile + " --hash=sha256:" + he + "\n#", 2, []string{"python.lock", "a lock's url is one URL"}},
		{"2.0 as 1.0", files + a1File, 1, []string{"the lock names alpha 1.0", "holds alpha 2.0"}},
	} {
		d := t.TempDir()
		b, _ := json.Marshal(map[string]any{"version": 1, "packages": []map[string]string{{"name": "alpha", "version": "1.0", "wheel": a1File, "sha256": h2, "url": c.url}}})
		if err := os.WriteFile(filepath.Join(d, "py.lock.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		python, _ := pyindex.Venv(t, py, filepath.Join(d, "venv"))
		code, out, errs := run(t, nil, "apply", "-f", writeRecipe(t, d, pyRecipe(python, ix.URL(), "py.lock.json")), "--state-dir", filepath.Join(d, "st"))
		if code != c.code {
			t.Errorf("%s: apply exit %d, want %d\n%s\n%s", c.name, code, c.code, out, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(out+errs, w) {
				t.Errorf("%s: the output does not say %q\n%s\n%s", c.name, w, out, errs)
			}
		}
		if exec.Command(python, "-c", "import evil").Run() == nil {
			t.Errorf("%s: evil is installed", c.name)
		}
	}
}
