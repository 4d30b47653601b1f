package patch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const upstreamC = "import os\n\ndef a():\n    return 1\n\ndef b():\n    return 2\n\ndef c():\n    return 3\n"

// threeWayFixture commits upstreamC as c.py, makes a patch of it with `git diff` (so its
// index line names the committed blob), then gives the tree the content drifted (committed
// on top: the preimage blob stays in the object store).
func threeWayFixture(t *testing.T, drifted string) *fixture {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	f := newFixture(t, map[string]string{"c.py": upstreamC})
	git(t, f.tree, "init", "-q")
	git(t, f.tree, "add", ".")
	git(t, f.tree, "commit", "-q", "-m", "upstream")
	writeFile(t, filepath.Join(f.tree, "c.py"), strings.Replace(upstreamC, "return 2", "return 20", 1), 0o644)
	diff := git(t, f.tree, "diff") + "\n"
	if !strings.Contains(diff, "\nindex ") {
		t.Fatalf("git diff has no index line:\n%s", diff)
	}
	writeFile(t, filepath.Join(f.recipe, "patches", "b.patch"), diff, 0o644)
	writeFile(t, filepath.Join(f.recipe, "patches", "series"), "b.patch\n", 0o644)
	writeFile(t, filepath.Join(f.tree, "c.py"), drifted, 0o644)
	git(t, f.tree, "commit", "-q", "-am", "drift")
	return f
}

// The tree's file has drifted from the patch's preimage (lines added above the hunk): the
// hunk no longer applies at its lines, and the step merges it three-way from the preimage
// blob the index line names.
func TestThreeWayMergesShiftedContext(t *testing.T) {
	drifted := "# header\n# added upstream\n" + strings.Replace(upstreamC, "import os\n", "import os\nimport sys\n", 1)
	f := threeWayFixture(t, drifted)
	if err := f.run(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := strings.Replace(drifted, "return 2", "return 20", 1)
	if got := f.read(t, "c.py"); got != want {
		t.Errorf("c.py =\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(f.log.String(), "applied by a three-way merge") || !strings.Contains(f.log.String(), "c.py") {
		t.Errorf("the log does not say the patch was merged:\n%s", f.log)
	}
	// A re-run finds the step intact.
	if ok, why, err := f.step.Intact(t.Context(), f.env); !ok || err != nil {
		t.Errorf("Intact = %v %q %v", ok, why, err)
	}
}

// The tree changed the very line the hunk changes: a real conflict, named with its file
// and hunk, and nothing is written.
func TestThreeWayConflictNamedAndChangesNothing(t *testing.T) {
	drifted := "# header\n" + strings.Replace(upstreamC, "return 2", "return 2  # changed upstream", 1)
	f := threeWayFixture(t, drifted)
	err := f.run(t)
	if err == nil {
		t.Fatal("Run over a conflicting tree succeeded")
	}
	for _, want := range []string{"patch b.patch does not apply: c.py: hunk @@ -4,7 +4,7 @@", "three-way merge has 1 conflict(s)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got := f.read(t, "c.py"); got != drifted {
		t.Errorf("c.py changed:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(f.tree, stageDir)); err == nil {
		t.Error("the stage folder was left")
	}
}

// A three-way merge writes its three versions in the step's own stage folder, never in
// the system's temporary folder (here one that does not exist); what a run killed
// mid-merge left there, and in the temporary folder from earlier versions, is removed.
func TestThreeWayMergeStagedInTheStepsFolder(t *testing.T) {
	drifted := "# header\n" + upstreamC
	f := threeWayFixture(t, drifted)
	// What a run killed mid-merge left in the stage folder.
	for _, name := range []string{"ours", "base", "theirs"} {
		writeFile(t, filepath.Join(f.tree, stageDir, "sglprov-merge-123", name), upstreamC, 0o600)
	}
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "no-such-folder"))
	if err := f.run(t); err != nil {
		t.Fatalf("Run with no usable system temporary folder: %v", err)
	}
	if got := f.read(t, "c.py"); got != strings.Replace(drifted, "return 2", "return 20", 1) {
		t.Errorf("c.py = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(f.tree, stageDir)); !os.IsNotExist(err) {
		t.Errorf("the stage folder is left: %v", err)
	}
	if !strings.Contains(f.log.String(), "1 staged file(s) or merge folder(s) and no journal") {
		t.Errorf("the log does not say what was found:\n%s", f.log)
	}

	// Merge folders an earlier version left in the system's temporary folder: the stale
	// ones of this user holding only the three versions go; others stay.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	old := time.Now().Add(-time.Hour)
	for dir, names := range map[string][]string{"sglprov-merge-old": {"ours", "base", "theirs"}, "sglprov-merge-fresh": {"ours"}, "sglprov-merge-other": {"ours", "notes"}} {
		for _, n := range names {
			writeFile(t, filepath.Join(tmp, dir, n), "x", 0o600)
		}
		if dir != "sglprov-merge-fresh" {
			if err := os.Chtimes(filepath.Join(tmp, dir), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.log.Reset()
	f.env.Force = true
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(tmp)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "sglprov-merge-fresh sglprov-merge-other" {
		t.Errorf("left in the temporary folder: %v", left)
	}
	if !strings.Contains(f.log.String(), "folders=1") {
		t.Errorf("the log does not count the removed folder:\n%s", f.log)
	}
}
