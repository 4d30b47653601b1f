package pylock_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/test/pyindex"
)

// pipInstall runs python -m pip install args with the tests' pip environment.
func pipInstall(t *testing.T, python string, args ...string) {
	t.Helper()
	cmd := exec.Command(python, append([]string{"-m", "pip", "install"}, args...)...)
	cmd.Env = pyindex.PipEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// has reports whether the environment of python imports module.
func has(python, module string) bool {
	return exec.Command(python, "-c", "import "+module).Run() == nil
}

// lockJSON is a lock file of entries (name, version, wheel, sha256, url), as JSON.
func lockJSON(t *testing.T, entries ...[5]string) []byte {
	t.Helper()
	type e struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Wheel   string `json:"wheel"`
		SHA256  string `json:"sha256"`
		URL     string `json:"url,omitempty"`
	}
	var ps []e
	for _, x := range entries {
		ps = append(ps, e{x[0], x[1], x[2], x[3], x[4]})
	}
	b, err := json.Marshal(map[string]any{"version": 1, "packages": ps})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostileLocksAgainstRealPip: lock files whose fields would carry more than their value
// into pip's requirements file, served by a real package index and installed by real pip
// as a locked step does (Read, then Install by URL): each is refused before pip runs,
// naming the field, and nothing it smuggles in is installed. A requirement added by a
// newline in a url (evil installed beside alpha), an environment marker in a url (pip
// would skip the package and report success), a name with a newline (its own
// requirements line), an entry whose wheel name says 1.0 and whose url and sha256 are of
// 2.0, two packages naming one wheel file, and a second JSON document after the first.
func TestHostileLocksAgainstRealPip(t *testing.T) {
	py := pyindex.NeedPip(t)
	ix := pyindex.Start(t)
	a1File, a1 := pyindex.BuildWheel(t, "alpha", "1.0", "a1")
	a2File, a2 := pyindex.BuildWheel(t, "alpha", "2.0", "a2")
	evilFile, evil := pyindex.BuildWheel(t, "evil", "6.6.6", "evil")
	ix.Publish("alpha", a1File, a1)
	ix.Publish("alpha", a2File, a2)
	ix.Publish("evil", evilFile, evil)
	files := ix.Srv.URL + "/files/"
	h1, h2, he := pyindex.SHA256(a1), pyindex.SHA256(a2), pyindex.SHA256(evil)
	dir := t.TempDir()
	python, _ := pyindex.Venv(t, py, filepath.Join(dir, "venv"))

	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"requirement smuggled in a url", lockJSON(t, [5]string{"alpha", "1.0", a1File, h1,
			files + a1File + " --hash=sha256:" + h1 + "\nevil @ " + files + evilFile + " --hash=sha256:" + he + "\n#"}), "a lock's url is one URL"},
		{"environment marker in a url", lockJSON(t, [5]string{"alpha", "1.0", a1File, h1, files + a1File + "; python_version < '3'"}), "holds ';'"},
		{"name with a newline", lockJSON(t, [5]string{"-r /etc/shadow\nevil", "6.6.6", evilFile, he, ""}), "is not a normalized project name"},
		{"1.0's wheel, 2.0's url and sha256", lockJSON(t, [5]string{"alpha", "1.0", a1File, h2, files + a2File}), "is not of the wheel " + a1File},
		{"two packages, one wheel", lockJSON(t, [5]string{"alpha", "1.0", a1File, h1, files + a1File}, [5]string{"evil", "6.6.6", a1File, he, files + a1File}), "is of alpha 1.0"},
		{"a second document", append(lockJSON(t, [5]string{"alpha", "1.0", a1File, h1, files + a1File}), lockJSON(t, [5]string{"evil", "6.6.6", evilFile, he, files + evilFile})...), "text follows the JSON document"},
	} {
		p := filepath.Join(dir, "x.lock.json")
		if err := os.WriteFile(p, c.body, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := pylock.Read(p)
		if err == nil {
			err = pylock.Install(context.Background(), python, l, pylock.InstallOptions{ByURL: true, PipArgs: []string{"--index-url", ix.URL()}, Env: pyindex.PipEnv()})
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a refusal saying %q", c.name, err, c.want)
		}
		if has(python, "evil") || has(python, "alpha") {
			t.Errorf("%s: the lock was refused, but the environment imports alpha or evil", c.name)
		}
	}
}

// TestLockedInstallIsComparedWithTheEnvironment: the index serves alpha 2.0's wheel under
// the file name alpha-1.0-py3-none-any.whl, and a lock (consistent in itself) names it as
// alpha 1.0 with those bytes' sha256: the locked install fails, naming 1.0 and 2.0, and
// never reports success. Then, on an environment real pip installed: a version other than
// the lock's, a distribution the lock does not name that the install added, an installed
// file whose bytes differ from its RECORD, and an archive whose sha256 is not the lock's
// each fail the comparison, naming both; the environment as the lock says passes.
func TestLockedInstallIsComparedWithTheEnvironment(t *testing.T) {
	py := pyindex.NeedPip(t)
	ctx := context.Background()
	ix := pyindex.Start(t)
	a1File, a1 := pyindex.BuildWheel(t, "alpha", "1.0", "a1")
	_, a2 := pyindex.BuildWheel(t, "alpha", "2.0", "a2")
	evilFile, evil := pyindex.BuildWheel(t, "evil", "6.6.6", "evil")
	ix.Publish("alpha", a1File, a2) // 2.0's bytes under 1.0's name
	ix.Publish("evil", evilFile, evil)
	dir := t.TempDir()

	python, site := pyindex.Venv(t, py, filepath.Join(dir, "venv"))
	lied := &pylock.Lock{Version: pylock.Version, Packages: []pylock.Package{
		{Name: "alpha", Version: "1.0", Wheel: a1File, SHA256: pyindex.SHA256(a2), URL: ix.Srv.URL + "/files/" + a1File}}}
	err := pylock.Install(ctx, python, lied, pylock.InstallOptions{ByURL: true, Env: pyindex.PipEnv()})
	t.Logf("installing 2.0 named as 1.0: %v", err)
	if err == nil || !strings.Contains(err.Error(), "1.0") || !strings.Contains(err.Error(), "2.0") {
		t.Errorf("installing 2.0's wheel named as 1.0: %v; want a failure naming 1.0 and 2.0", err)
	}

	// Real pip installs alpha 1.0 and evil into a fresh environment.
	ix2 := pyindex.Start(t)
	ix2.Publish("alpha", a1File, a1)
	ix2.Publish("evil", evilFile, evil)
	python, site = pyindex.Venv(t, py, filepath.Join(dir, "venv2"))
	before, err := pylock.TakeSnapshot(site)
	if err != nil {
		t.Fatal(err)
	}
	pipInstall(t, python, "--index-url", ix2.URL(), "alpha==1.0", "evil")
	lock := &pylock.Lock{Version: pylock.Version, Packages: []pylock.Package{
		{Name: "alpha", Version: "1.0", Wheel: a1File, SHA256: pyindex.SHA256(a1)}}}
	if err := pylock.Verify(ctx, site, lock, nil); err != nil {
		t.Errorf("the environment as the lock says: %v", err)
	}
	if err := pylock.Verify(ctx, site, lock, before); err == nil || !strings.Contains(err.Error(), "evil 6.6.6") || !strings.Contains(err.Error(), "which the lock does not name") {
		t.Errorf("evil beside the lock's alpha: %v; want evil 6.6.6 named", err)
	}
	two := &pylock.Lock{Version: pylock.Version, Packages: []pylock.Package{
		{Name: "alpha", Version: "2.0", Wheel: "alpha-2.0-py3-none-any.whl", SHA256: pyindex.SHA256(a2)}}}
	if err := pylock.Verify(ctx, site, two, nil); err == nil || !strings.Contains(err.Error(), "the lock names alpha 2.0") || !strings.Contains(err.Error(), "holds alpha 1.0") {
		t.Errorf("the lock says 2.0, 1.0 is installed: %v; want both named", err)
	}
	// An installed file changed after pip wrote its RECORD.
	init := filepath.Join(site, "alpha", "__init__.py")
	if err := os.WriteFile(init, []byte("V = '1.0'\nMARK = 'changed'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pylock.Verify(ctx, site, lock, nil); err == nil || !strings.Contains(err.Error(), init) || !strings.Contains(err.Error(), "RECORD") {
		t.Errorf("a changed installed file: %v; want %s and its RECORD named", err, init)
	}
	// An install by URL records its archive's sha256 (direct_url.json): another than the
	// lock's is named.
	python, site = pyindex.Venv(t, py, filepath.Join(dir, "venv3"))
	pipInstall(t, python, "alpha @ "+ix2.Srv.URL+"/files/"+a1File)
	other := &pylock.Lock{Version: pylock.Version, Packages: []pylock.Package{
		{Name: "alpha", Version: "1.0", Wheel: a1File, SHA256: strings.Repeat("0", 64)}}}
	if err := pylock.Verify(ctx, site, other, nil); err == nil || !strings.Contains(err.Error(), pyindex.SHA256(a1)) || !strings.Contains(err.Error(), strings.Repeat("0", 64)) {
		t.Errorf("an archive other than the lock's: %v; want both sha256 named", err)
	}
}
