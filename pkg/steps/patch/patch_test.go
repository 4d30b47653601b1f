package patch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

const baseA = "one\ntwo\nthree\nfour\nfive\n"
const baseB = "alpha\nbeta\ngamma\n"

const patchA = `From: test
Subject: change three

---
diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -2,3 +2,3 @@
 two
-three
+THREE
 four
`

const patchB = `diff --git a/b.txt b/b.txt
--- a/b.txt
+++ b/b.txt
@@ -1,3 +1,3 @@
 alpha
-beta
+BETA
 gamma
`

// patchAB changes a.txt, then b.txt in a hunk that expects a line b.txt does not have.
const patchAB = `diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -2,3 +2,3 @@
 two
-three
+THREE
 four
diff --git a/b.txt b/b.txt
--- a/b.txt
+++ b/b.txt
@@ -1,3 +1,3 @@
 alpha
-delta
+DELTA
 gamma
`

const patchNewDelete = `diff --git a/sub/dir/new.sh b/sub/dir/new.sh
new file mode 100755
index 0000000..1111111
--- /dev/null
+++ b/sub/dir/new.sh
@@ -0,0 +1,2 @@
+#!/bin/sh
+echo hi
diff --git a/b.txt b/b.txt
deleted file mode 100644
index 1111111..0000000
--- a/b.txt
+++ /dev/null
@@ -1,3 +0,0 @@
-alpha
-beta
-gamma
`

const patchCRLF = "diff --git a/c.txt b/c.txt\n--- a/c.txt\n+++ b/c.txt\n@@ -1,3 +1,3 @@\n x\r\n-y\r\n+Y\r\n z\r\n"

const patchNoEOL = `diff --git a/d.txt b/d.txt
--- a/d.txt
+++ b/d.txt
@@ -1,2 +1,2 @@
 p
-q
\ No newline at end of file
+Q
\ No newline at end of file
`

type fixture struct {
	tree   string
	recipe string
	env    *engine.Env
	log    *bytes.Buffer
	step   *Step
}

// newFixture writes files into a fresh tree, the patches and a series naming them (in
// order) into a recipe folder, and builds the step.
func newFixture(t *testing.T, files map[string]string, patches ...[2]string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{tree: filepath.Join(dir, "tree"), recipe: filepath.Join(dir, "recipe"), log: &bytes.Buffer{}}
	for name, content := range files {
		writeFile(t, filepath.Join(f.tree, name), content, 0o644)
	}
	if err := os.MkdirAll(f.tree, 0o755); err != nil {
		t.Fatal(err)
	}
	series := "# test series\n\n"
	for _, p := range patches {
		writeFile(t, filepath.Join(f.recipe, "patches", p[0]), p[1], 0o644)
		series += p[0] + "\n"
	}
	writeFile(t, filepath.Join(f.recipe, "patches", "series"), series, 0o644)
	f.env = engine.NewTestEnv(dir, f.log)
	f.env.RecipeDir = f.recipe
	step, err := New("sm120-patches", Spec{Dir: f.tree, Series: "patches/series"})
	if err != nil {
		t.Fatal(err)
	}
	f.step = step
	return f
}

func writeFile(t *testing.T, p, content string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.tree, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (f *fixture) run(t *testing.T) error {
	t.Helper()
	return f.step.Run(context.Background(), f.env)
}

func TestRunApplies(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		patches [][2]string
		want    map[string]string // "" means the file must not exist
	}{
		{
			name:    "one patch",
			files:   map[string]string{"a.txt": baseA},
			patches: [][2]string{{"0001-a.patch", patchA}},
			want:    map[string]string{"a.txt": "one\ntwo\nTHREE\nfour\nfive\n"},
		},
		{
			name:    "two patches",
			files:   map[string]string{"a.txt": baseA, "b.txt": baseB},
			patches: [][2]string{{"0001-a.patch", patchA}, {"0002-b.patch", patchB}},
			want:    map[string]string{"a.txt": "one\ntwo\nTHREE\nfour\nfive\n", "b.txt": "alpha\nBETA\ngamma\n"},
		},
		{
			name:    "crlf file",
			files:   map[string]string{"c.txt": "x\r\ny\r\nz\r\n"},
			patches: [][2]string{{"crlf.patch", patchCRLF}},
			want:    map[string]string{"c.txt": "x\r\nY\r\nz\r\n"},
		},
		{
			name:    "no newline at end of file",
			files:   map[string]string{"d.txt": "p\nq"},
			patches: [][2]string{{"noeol.patch", patchNoEOL}},
			want:    map[string]string{"d.txt": "p\nQ"},
		},
		{
			name:    "plain diff -u with a/ and b/ folders",
			files:   map[string]string{"sub/a.txt": baseA},
			patches: [][2]string{{"plain.patch", "--- a/sub/a.txt\t2026-11-30 10:00:00\n+++ b/sub/a.txt\t2026-11-30 10:01:00\n@@ -1,5 +1,5 @@\n one\n two\n-three\n+THREE\n four\n five\n"}},
			want:    map[string]string{"sub/a.txt": "one\ntwo\nTHREE\nfour\nfive\n"},
		},
		{
			name:    "new and deleted file",
			files:   map[string]string{"b.txt": baseB},
			patches: [][2]string{{"newdel.patch", patchNewDelete}},
			want:    map[string]string{"sub/dir/new.sh": "#!/bin/sh\necho hi\n", "b.txt": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.files, tc.patches...)
			if err := f.run(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			for name, want := range tc.want {
				p := filepath.Join(f.tree, name)
				b, err := os.ReadFile(p)
				if want == "" {
					if !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s: want it deleted, err=%v", name, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, string(b)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", name, diff)
				}
			}
			ok, reason, err := f.step.Intact(context.Background(), f.env)
			if err != nil || !ok {
				t.Errorf("Intact after apply = %v, %q, %v; want true", ok, reason, err)
			}
			if !strings.Contains(f.log.String(), "patch applied") {
				t.Errorf("log does not say the patch was applied:\n%s", f.log)
			}
		})
	}
}

func TestRunAlreadyAppliedChangesNothing(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB},
		[2]string{"0001-a.patch", patchA}, [2]string{"0002-newdel.patch", patchNewDelete})
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, name := range []string{"a.txt", "sub/dir/new.sh"} {
		if err := os.Chtimes(filepath.Join(f.tree, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	f.log.Reset()
	if err := f.run(t); err != nil {
		t.Fatalf("second Run: %v", err)
	}
	for _, name := range []string{"a.txt", "sub/dir/new.sh"} {
		fi, err := os.Stat(filepath.Join(f.tree, name))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(old) {
			t.Errorf("%s was rewritten by the second run", name)
		}
	}
	if got := strings.Count(f.log.String(), "patch already applied"); got != 2 {
		t.Errorf("log says %d patches already applied, want 2:\n%s", got, f.log)
	}
	if f.read(t, "a.txt") != "one\ntwo\nTHREE\nfour\nfive\n" {
		t.Errorf("a.txt changed: %q", f.read(t, "a.txt"))
	}
}

// A series where one patch is in the tree already (applied by hand) and the next is not.
func TestRunPartlyApplied(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "one\ntwo\nTHREE\nfour\nfive\n", "b.txt": baseB},
		[2]string{"0001-a.patch", patchA}, [2]string{"0002-b.patch", patchB})
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if f.read(t, "b.txt") != "alpha\nBETA\ngamma\n" {
		t.Errorf("b.txt = %q", f.read(t, "b.txt"))
	}
	for _, want := range []string{"patch already applied patch=0001-a.patch", "patch applied patch=0002-b.patch"} {
		if !strings.Contains(f.log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, f.log)
		}
	}
}

func TestRunConflictChangesNothing(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		patches [][2]string
		want    []string // substrings of the error
	}{
		{
			name:    "second file of one patch",
			files:   map[string]string{"a.txt": baseA, "b.txt": baseB},
			patches: [][2]string{{"0001-ab.patch", patchAB}},
			want:    []string{"0001-ab.patch", "b.txt", "@@ -1,3 +1,3 @@", `line 2: expected "delta", found "beta"`},
		},
		{
			name:  "second patch of a series",
			files: map[string]string{"a.txt": baseA, "b.txt": "alpha\nbeta2\ngamma\n"},
			patches: [][2]string{
				{"0001-a.patch", patchA}, {"0002-b.patch", patchB},
			},
			want: []string{"0002-b.patch", "b.txt", "@@ -1,3 +1,3 @@", `line 2: expected "beta", found "beta2"`},
		},
		{
			name:    "offset drift",
			files:   map[string]string{"a.txt": "zero\nhalf\n" + baseA},
			patches: [][2]string{{"0001-a.patch", patchA}},
			want:    []string{"0001-a.patch", "a.txt", "@@ -2,3 +2,3 @@", `line 2: expected "two", found "half"`, "at line 4 instead", "without offset or fuzz"},
		},
		{
			name:    "missing file",
			files:   map[string]string{"b.txt": baseB},
			patches: [][2]string{{"0001-a.patch", patchA}},
			want:    []string{"0001-a.patch", "a.txt", "does not exist"},
		},
		{
			name:    "file shorter than the hunk",
			files:   map[string]string{"a.txt": "one\ntwo\n"},
			patches: [][2]string{{"0001-a.patch", patchA}},
			want:    []string{"@@ -2,3 +2,3 @@", `line 3: expected "three", found the end of the file`},
		},
		{
			name:    "crlf file with an lf patch",
			files:   map[string]string{"c.txt": "x\r\ny\r\nz\r\n"},
			patches: [][2]string{{"lf.patch", strings.ReplaceAll(patchCRLF, "\r", "")}},
			want:    []string{`line 1: expected "x", found "x\r"`, "line endings"},
		},
		{
			name:    "new file exists",
			files:   map[string]string{"b.txt": baseB, "sub/dir/new.sh": "other\n"},
			patches: [][2]string{{"newdel.patch", patchNewDelete}},
			want:    []string{"sub/dir/new.sh", "already exists"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.files, tc.patches...)
			old := time.Now().Add(-time.Hour)
			for name := range tc.files {
				if err := os.Chtimes(filepath.Join(f.tree, name), old, old); err != nil {
					t.Fatal(err)
				}
			}
			err := f.run(t)
			if err == nil {
				t.Fatal("Run succeeded, want a conflict")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for name, content := range tc.files {
				p := filepath.Join(f.tree, name)
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if got := f.read(t, name); got != content || !fi.ModTime().Equal(old) {
					t.Errorf("%s was touched: content %q, mtime %v", name, got, fi.ModTime())
				}
			}
			if _, err := os.Stat(filepath.Join(f.tree, "sub/dir/new.sh")); err == nil && tc.files["sub/dir/new.sh"] == "" {
				t.Error("a file of the series was created despite the conflict")
			}
		})
	}
}

func TestPathEscapeRefused(t *testing.T) {
	tests := []struct {
		name, patch string
	}{
		{"dot dot", strings.ReplaceAll(patchA, "a/a.txt", "a/../../evil.txt") + ""},
		{"dot dot in new name", strings.NewReplacer("a/a.txt", "a/../evil", "b/a.txt", "b/../evil").Replace(patchA)},
		{"absolute", "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+evil\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"x.patch", tc.patch})
			err := f.run(t)
			if err == nil || !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "leaves the tree") {
				t.Fatalf("Run error = %v; want a usage error saying the path leaves the tree", err)
			}
			if f.read(t, "a.txt") != baseA {
				t.Error("a.txt changed")
			}
		})
	}
}

func TestSymlinkOutOfTreeRefused(t *testing.T) {
	f := newFixture(t, map[string]string{"b.txt": baseB}, [2]string{"0001-a.patch", strings.ReplaceAll(patchA, "a.txt", "link/a.txt")})
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "a.txt"), baseA, 0o644)
	if err := os.Symlink(outside, filepath.Join(f.tree, "link")); err != nil {
		t.Fatal(err)
	}
	err := f.run(t)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Run error = %v; want a refusal naming the symbolic link", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "a.txt")); string(b) != baseA {
		t.Error("the file outside the tree was changed")
	}
}

func TestModes(t *testing.T) {
	f := newFixture(t, nil, [2]string{"0001-a.patch", patchA}, [2]string{"0002-new.patch", `diff --git a/tool.sh b/tool.sh
new file mode 100755
--- /dev/null
+++ b/tool.sh
@@ -0,0 +1 @@
+echo tool
`}, [2]string{"0003-chmod.patch", `diff --git a/ro.txt b/ro.txt
old mode 100644
new mode 100600
`})
	writeFile(t, filepath.Join(f.tree, "a.txt"), baseA, 0o750)
	writeFile(t, filepath.Join(f.tree, "ro.txt"), "secret\n", 0o644)
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"a.txt": 0o750, "tool.sh": 0o755, "ro.txt": 0o600} {
		fi, err := os.Stat(filepath.Join(f.tree, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
}

func TestHandEdit(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"0001-a.patch", patchA})
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	edited := "one\ntwo\nTHREE\nfour\nfive\nsix\n"
	writeFile(t, filepath.Join(f.tree, "a.txt"), edited, 0o644)

	ok, reason, err := f.step.Intact(context.Background(), f.env)
	if err != nil || ok || reason != "outputs changed: "+filepath.Join(f.tree, "a.txt") {
		t.Errorf("Intact = %v, %q, %v; want false, outputs changed: a.txt", ok, reason, err)
	}
	err = f.run(t)
	if err == nil {
		t.Fatal("Run over a hand edit succeeded")
	}
	for _, w := range []string{filepath.Join(f.tree, "a.txt"), "was changed by hand", "sglprov apply --force sm120-patches"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if f.read(t, "a.txt") != edited {
		t.Error("the hand edit was overwritten")
	}

	// Back to the pre-image (e.g. restored by hand): the series applies again.
	writeFile(t, filepath.Join(f.tree, "a.txt"), baseA, 0o644)
	if err := f.run(t); err != nil {
		t.Fatalf("Run over the pristine file: %v", err)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestForceRestoresFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB},
		[2]string{"0001-a.patch", patchA}, [2]string{"0002-newdel.patch", patchNewDelete})
	git(t, f.tree, "init", "-q")
	git(t, f.tree, "add", ".")
	git(t, f.tree, "commit", "-q", "-m", "base")
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(f.tree, "a.txt"), "edited by hand\n", 0o644)
	writeFile(t, filepath.Join(f.tree, "sub/dir/new.sh"), "edited too\n", 0o755)
	if err := f.run(t); err == nil {
		t.Fatal("Run over a hand edit succeeded")
	}
	f.env.Force = true
	if err := f.run(t); err != nil {
		t.Fatalf("forced Run: %v", err)
	}
	if got := f.read(t, "a.txt"); got != "one\ntwo\nTHREE\nfour\nfive\n" {
		t.Errorf("a.txt = %q", got)
	}
	if got := f.read(t, "sub/dir/new.sh"); got != "#!/bin/sh\necho hi\n" {
		t.Errorf("new.sh = %q", got)
	}
	if _, err := os.Stat(filepath.Join(f.tree, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b.txt should be deleted again: %v", err)
	}
	ok, reason, err := f.step.Intact(context.Background(), f.env)
	if err != nil || !ok {
		t.Errorf("Intact after force = %v, %q, %v", ok, reason, err)
	}
}

func TestForceOutsideGitFails(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"0001-a.patch", patchA})
	f.env.Force = true
	if err := f.run(t); err == nil || !strings.Contains(err.Error(), "not a git work tree") {
		t.Fatalf("Run error = %v; want it to say the tree is not a git work tree", err)
	}
}

func TestFingerprint(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"0001-a.patch", patchA}, [2]string{"0002-b.patch", patchB})
	fp, err := f.step.Fingerprint(context.Background(), f.env)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"series":             digest([]byte("# test series\n\n0001-a.patch\n0002-b.patch\n")),
		"patch:0001-a.patch": digest([]byte(patchA)),
		"patch:0002-b.patch": digest([]byte(patchB)),
	}
	if diff := cmp.Diff(want, fp); diff != "" {
		t.Errorf("fingerprint (-want +got):\n%s", diff)
	}
	writeFile(t, filepath.Join(f.recipe, "patches", "0002-b.patch"), patchB+" \n", 0o644)
	fp2, err := f.step.Fingerprint(context.Background(), f.env)
	if err != nil {
		t.Fatal(err)
	}
	if fp2["patch:0002-b.patch"] == fp["patch:0002-b.patch"] {
		t.Error("editing a patch did not change the fingerprint")
	}
}

func TestSeriesNames(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
		wantErr    string
	}{
		{name: "comments and blanks", text: "# head\n\n0001-a.patch\n  0002-b.patch  # why\n", want: []string{"0001-a.patch", "0002-b.patch"}},
		{name: "subfolder", text: "extra/0001.patch\n", want: []string{"extra/0001.patch"}},
		{name: "empty", text: "# nothing yet\n", want: nil},
		{name: "quilt options", text: "0001.patch -p1\n", wantErr: "one patch name a line"},
		{name: "escape", text: "../0001.patch\n", wantErr: "not a path inside"},
		{name: "absolute", text: "/etc/0001.patch\n", wantErr: "not a path inside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := seriesNames([]byte(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestKind(t *testing.T) {
	k := Kind()
	spec, ok := k.NewSpec().(*Spec)
	if !ok {
		t.Fatalf("NewSpec returned %T", k.NewSpec())
	}
	if _, err := k.New("p", spec); !errors.Is(err, exitcode.ErrUsage) {
		t.Errorf("New with an empty spec: %v; want a usage error", err)
	}
	spec.Dir, spec.Series = "/opt/sglang", "patches/series"
	if _, err := k.New("p", spec); err != nil {
		t.Errorf("New: %v", err)
	}
}

// A series whose patches only change modes applies them: it is not "already applied" while
// the files have the old modes, and it is once they have the new ones.
func TestModeOnlyPatch(t *testing.T) {
	f := newFixture(t, nil, [2]string{"0001-exec.patch", `diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
`}, [2]string{"0002-private.patch", `diff --git a/key.txt b/key.txt
old mode 100644
new mode 100600
`})
	writeFile(t, filepath.Join(f.tree, "run.sh"), "echo run\n", 0o664)
	writeFile(t, filepath.Join(f.tree, "key.txt"), "k\n", 0o644)
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"run.sh": 0o755, "key.txt": 0o600} {
		fi, err := os.Stat(filepath.Join(f.tree, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	if strings.Contains(f.log.String(), resultAlreadyApplied) {
		t.Errorf("the first run says a patch was already applied:\n%s", f.log)
	}
	// Again, on the changed tree: already applied, nothing changed.
	f.log.Reset()
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(f.tree, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh after the second run: %v, %v", fi, err)
	}
	if !strings.Contains(f.log.String(), resultAlreadyApplied) {
		t.Errorf("the second run does not say the patches were already applied:\n%s", f.log)
	}
}
