package pylock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/test/ociregistry"
	"github.com/sglprov/sglprov/test/pyindex"
)

// installed returns what python imports of module: its V and MARK.
func installed(t *testing.T, python, module string) string {
	t.Helper()
	out, err := exec.Command(python, "-c", "import "+module+" as m; print(m.V, m.MARK)").CombinedOutput()
	if err != nil {
		t.Fatalf("importing %s: %v: %s", module, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestLockThroughTheFleetCache: node A resolves alpha (which needs beta) from a real
// package index with real pip, and its lock is read from the environment and pip's report
// (each wheel's sha256 is the one the index served); the lock and its wheels go to the
// real registry. A newer beta is then published and the index stopped: node B installs
// the locked, older beta from the registry's wheels alone. A wheel that differs from the
// lock is refused with both digests named, from the registry's folder and from the index.
func TestLockThroughTheFleetCache(t *testing.T) {
	py := pyindex.NeedPip(t)
	reg := ociregistry.StartT(t)
	ctx := context.Background()
	ix := pyindex.Start(t)
	alphaFile, alpha := pyindex.BuildWheel(t, "alpha", "1.0", "a1", "beta>=1.0")
	betaFile, beta := pyindex.BuildWheel(t, "beta", "1.0", "b1")
	ix.Publish("alpha", alphaFile, alpha)
	ix.Publish("beta", betaFile, beta)

	// Node A: the Python step as a recipe has it, with the report sglprov asks pip for.
	a := t.TempDir()
	pyA, siteA := pyindex.Venv(t, py, filepath.Join(a, "venv"))
	report := filepath.Join(a, "pip-report.json")
	cmd := exec.Command(pyA, "-m", "pip", "install", "--index-url", ix.URL(), "alpha")
	cmd.Env = pyindex.PipEnv("PIP_REPORT=" + report)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node A's pip install: %v: %s", err, out)
	}
	lock, err := pylock.Scan(siteA, []string{report})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"alpha": pyindex.SHA256(alpha), "beta": pyindex.SHA256(beta)}
	if len(lock.Packages) != 2 {
		t.Fatalf("the lock holds %+v, want alpha and beta", lock.Packages)
	}
	for _, p := range lock.Packages {
		if p.SHA256 != want[p.Name] || p.Version != "1.0" {
			t.Errorf("locked %s %s sha256 %s, want 1.0 and %s (the wheel the index served)", p.Name, p.Version, p.SHA256, want[p.Name])
		}
	}
	for _, l := range lock.Local {
		if l.Name == "alpha" || l.Name == "beta" {
			t.Errorf("%s is in the lock as %s", l.Name, l.Source)
		}
	}
	// The lock reads the same from the same environment: it is what is there, not a guess.
	again, err := pylock.Scan(siteA, []string{report})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := lock.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two scans of one environment: %s and %s", d1, d2)
	}

	wheelsA := filepath.Join(a, "wheels")
	if err := pylock.Collect(ctx, lock, wheelsA, fetch.Options{}); err != nil {
		t.Fatal(err)
	}
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("7a", 32)
	if _, err := pylock.Publish(ctx, pusher, tag, lock, wheelsA); err != nil {
		t.Fatal(err)
	}

	// A newer beta is published, then the index goes away.
	beta2File, beta2 := pyindex.BuildWheel(t, "beta", "2.0", "b2")
	ix.Publish("beta", beta2File, beta2)
	ix.Srv.Close()

	// Node B: same recipe and cache, no index.
	b := t.TempDir()
	pyB, siteB := pyindex.Venv(t, py, filepath.Join(b, "venv"))
	puller, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/sglprov"}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wheelsB := filepath.Join(b, "wheels")
	got, _, err := pylock.FromCache(ctx, puller, tag, wheelsB)
	if err != nil || got == nil {
		t.Fatalf("the lock from the registry: %v, %v", got, err)
	}
	if err := pylock.Install(ctx, pyB, got, pylock.InstallOptions{WheelDir: wheelsB, Env: pyindex.PipEnv()}); err != nil {
		t.Fatal(err)
	}
	if v := installed(t, pyB, "beta"); v != "1.0 b1" {
		t.Errorf("node B has beta %q, want the locked 1.0 (b1), not the newer 2.0", v)
	}
	if v := installed(t, pyB, "alpha"); v != "1.0 a1" {
		t.Errorf("node B has alpha %q, want 1.0", v)
	}
	lockB, err := pylock.Scan(siteB, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lockB.Local {
		if l.Name == "beta" && l.Version != "1.0" {
			t.Errorf("node B's environment holds beta %s", l.Version)
		}
	}

	// A wheel in the folder that is not the lock's is refused, both digests named.
	_, other := pyindex.BuildWheel(t, "beta", "1.0", "tampered")
	if err := os.WriteFile(filepath.Join(wheelsB, betaFile), other, 0o644); err != nil {
		t.Fatal(err)
	}
	pyC, _ := pyindex.Venv(t, py, filepath.Join(b, "venv-c"))
	err = pylock.Install(ctx, pyC, got, pylock.InstallOptions{WheelDir: wheelsB, Env: pyindex.PipEnv()})
	var me *pylock.MismatchError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), pyindex.SHA256(beta)) || !strings.Contains(err.Error(), pyindex.SHA256(other)) {
		t.Errorf("a tampered wheel in the folder: %v; want a refusal naming %s and %s", err, pyindex.SHA256(beta), pyindex.SHA256(other))
	}

	// From an index that serves other bytes under the locked name: pip's --require-hashes
	// refuses, and its message names both digests.
	ix2 := pyindex.Start(t)
	ix2.Publish("alpha", alphaFile, alpha)
	ix2.Publish("beta", betaFile, other)
	err = pylock.Install(ctx, pyC, got, pylock.InstallOptions{PipArgs: []string{"--index-url", ix2.URL()}, Env: pyindex.PipEnv()})
	if err == nil || !strings.Contains(err.Error(), pyindex.SHA256(beta)) || !strings.Contains(err.Error(), pyindex.SHA256(other)) {
		t.Errorf("a tampered wheel on the index: %v; want a refusal naming %s and %s", err, pyindex.SHA256(beta), pyindex.SHA256(other))
	}
	// The same by the URLs the lock records (as a locked recipe step installs it).
	moved := *got
	moved.Packages = nil
	for _, p := range got.Packages {
		p.URL = ix2.Srv.URL + "/files/" + p.Wheel
		moved.Packages = append(moved.Packages, p)
	}
	err = pylock.Install(ctx, pyC, &moved, pylock.InstallOptions{ByURL: true, Env: pyindex.PipEnv()})
	if err == nil || !strings.Contains(err.Error(), pyindex.SHA256(beta)) || !strings.Contains(err.Error(), pyindex.SHA256(other)) {
		t.Errorf("a tampered wheel at the locked URL: %v; want a refusal naming %s and %s", err, pyindex.SHA256(beta), pyindex.SHA256(other))
	}
}
