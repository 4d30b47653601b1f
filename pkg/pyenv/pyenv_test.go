package pyenv_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/pyenv"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/test/ociregistry"
	"github.com/sglprov/sglprov/test/pyindex"
)

// installed makes a venv at dir with alpha and beta installed by pip from a real index.
func installed(t *testing.T, py, dir string) string {
	t.Helper()
	ix := pyindex.Start(t)
	af, a := pyindex.BuildWheel(t, "alpha", "1.0", "a1", "beta>=1.0")
	bf, b := pyindex.BuildWheel(t, "beta", "1.0", "b1")
	ix.Publish("alpha", af, a)
	ix.Publish("beta", bf, b)
	python, _ := pyindex.Venv(t, py, dir)
	cmd := exec.Command(python, "-m", "pip", "install", "--index-url", ix.URL(), "alpha")
	cmd.Env = pyindex.PipEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	return python
}

// TestEnvironmentThroughRegistry: node A's venv, pushed whole; node B (the same path, the
// venv gone) unpacks it from the real registry and its interpreter imports what node A's
// pip installed, its pip script runs, and the lock's check passes; a lock naming another
// version makes the node fall back, saying why, with the venv folder untouched.
func TestEnvironmentThroughRegistry(t *testing.T) {
	py := pyindex.NeedPip(t)
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	venv := filepath.Join(t.TempDir(), "venv")
	python := installed(t, py, venv)

	pusher, _ := cache.New(cache.Config{Repository: reg.Addr + "/fleet/env", Push: true}, cache.Options{})
	a, err := pyenv.Publish(ctx, pusher, "pyenv-x", venv, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var m pyenv.Meta
	if err := json.Unmarshal(a.Meta, &m); err != nil {
		t.Fatal(err)
	}
	if m.Packages["alpha"] != "1.0" || m.Packages["beta"] != "1.0" || m.Path != venv || m.Files < 100 {
		t.Fatalf("meta %+v", m)
	}
	if err := os.RemoveAll(venv); err != nil {
		t.Fatal(err)
	}
	puller, _ := cache.New(cache.Config{Repository: reg.Addr + "/fleet/env"}, cache.Options{})
	lock := &pylock.Lock{Version: 1, Packages: []pylock.Package{{Name: "beta", Version: "1.0"}}}
	got, _, err := pyenv.Restore(ctx, puller, "pyenv-x", venv, pyenv.Options{Lock: lock})
	if err != nil || got == nil || got.Digest != a.Digest {
		t.Fatalf("restore: %v %v", got, err)
	}
	out, err := exec.Command(python, "-c", "import alpha, beta; print(beta.V, beta.MARK)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1.0 b1" {
		t.Fatalf("the unpacked environment: %s %v", out, err)
	}
	if out, err := exec.Command(filepath.Join(venv, "bin", "pip"), "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), venv) {
		t.Fatalf("the unpacked pip script: %s %v", out, err)
	}

	// A lock that names another version: fall back, the venv as it was.
	other := &pylock.Lock{Version: 1, Packages: []pylock.Package{{Name: "beta", Version: "2.0"}}}
	os.WriteFile(filepath.Join(venv, "marker"), []byte("x"), 0o644)
	_, _, err = pyenv.Restore(ctx, puller, "pyenv-x", venv, pyenv.Options{Lock: other})
	if !pyenv.IsFallback(err) || !strings.Contains(err.Error(), "holds beta 1.0, the lock 2.0") {
		t.Fatalf("restore against another lock: %v", err)
	}
	if _, err := os.Stat(filepath.Join(venv, "marker")); err != nil {
		t.Fatalf("the venv was changed by a refused restore: %v", err)
	}
	// Another path: fall back, naming both.
	_, _, err = pyenv.Restore(ctx, puller, "pyenv-x", venv+"2", pyenv.Options{})
	if !pyenv.IsFallback(err) || !strings.Contains(err.Error(), "was made at "+venv+", this node's is at "+venv+"2") {
		t.Fatalf("restore at another path: %v", err)
	}
	if _, err := os.Lstat(venv + "2"); !os.IsNotExist(err) {
		t.Fatalf("a refused restore made the folder: %v", err)
	}
}

// TestOtherInterpreterFallsBack: an artifact made on an interpreter of another version
// (its record says so) is refused before a byte is pulled, naming both versions; a
// record that names a file set the tree does not hold is refused after the unpack, and
// the destination is not made.
func TestOtherInterpreterFallsBack(t *testing.T) {
	py := pyindex.NeedPip(t)
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	venv := filepath.Join(t.TempDir(), "venv")
	installed(t, py, venv)
	c, _ := cache.New(cache.Config{Repository: reg.Addr + "/fleet/env", Push: true}, cache.Options{})
	a, err := pyenv.Publish(ctx, c, "real", venv, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var m pyenv.Meta
	json.Unmarshal(a.Meta, &m)
	push := func(tag string, m pyenv.Meta) {
		meta, _ := json.Marshal(m)
		files := make([]cache.File, len(a.Files))
		copy(files, a.Files)
		// The layers are already in the registry: pushed again from a copy of one is not
		// needed; Push skips blobs the registry has, so Path is only read for missing ones.
		if _, err := c.Push(ctx, tag, pyenv.Kind, meta, files); err != nil {
			t.Fatal(err)
		}
	}
	old := m
	old.PythonVersion = "2.7.18"
	push("old-python", old)
	os.RemoveAll(venv)
	_, _, err = pyenv.Restore(ctx, c, "old-python", venv, pyenv.Options{})
	if !pyenv.IsFallback(err) || !strings.Contains(err.Error(), "2.7.18") {
		t.Fatalf("restore for another interpreter: %v", err)
	}
	lying := m
	lying.Packages = map[string]string{"alpha": "1.0", "beta": "1.0", "gamma": "3.0"}
	push("lying", lying)
	_, _, err = pyenv.Restore(ctx, c, "lying", venv, pyenv.Options{})
	if err == nil || !strings.Contains(err.Error(), "it lacks gamma 3.0") {
		t.Fatalf("restore of a record that lies: %v", err)
	}
	if _, err := os.Lstat(venv); !os.IsNotExist(err) {
		t.Fatalf("a refused unpack left the venv: %v", err)
	}
	if left, _ := filepath.Glob(venv + ".sglprov-*"); len(left) != 0 {
		t.Fatalf("left beside: %v", left)
	}
}
