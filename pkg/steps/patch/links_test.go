package patch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// newLinkPatch is `git diff` of a new symbolic link at name pointing to target.
func newLinkPatch(name, target string) string {
	return "diff --git a/" + name + " b/" + name + "\nnew file mode 120000\nindex 0000000..2e65efe\n--- /dev/null\n+++ b/" + name +
		"\n@@ -0,0 +1 @@\n+" + target + "\n\\ No newline at end of file\n"
}

func TestPatchMakesSymlinkInsideTheTree(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": baseA, "sub/b.txt": baseB},
		[2]string{"0001-link.patch", newLinkPatch("sub/link", "../a.txt")})
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(f.tree, "sub", "link")
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("sub/link = %v, %v; want a symbolic link", fi, err)
	}
	if target, _ := os.Readlink(p); target != "../a.txt" {
		t.Errorf("sub/link points to %q, want ../a.txt", target)
	}
	if got := f.read(t, "sub/link"); got != baseA {
		t.Errorf("reading through sub/link = %q", got)
	}
	ctx := context.Background()
	if ok, why, err := f.step.Intact(ctx, f.env); err != nil || !ok {
		t.Errorf("Intact after the run = %v, %q, %v", ok, why, err)
	}
	// A second run finds the link made: already applied, nothing written.
	f.log.Reset()
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.log.String(), "already applied") {
		t.Errorf("second run log: %s", f.log.String())
	}
	// The link pointed elsewhere by hand is a change of the outputs.
	os.Remove(p)
	if err := os.Symlink("b.txt", p); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := f.step.Intact(ctx, f.env); ok {
		t.Error("Intact with the link repointed")
	}
}

func TestPatchSymlinkOutOfTheTreeRefused(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "secret\n", 0o600)
	for _, tc := range []struct{ name, target, want string }{
		{"dot dot", "../../" + filepath.Base(outside) + "/secret", "points out of the tree"},
		{"absolute", filepath.Join(outside, "secret"), "is an absolute path"},
		{"through a link", "out/secret", "leads out of the tree through a symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"0001-a.patch", patchA}, [2]string{"0002-link.patch", newLinkPatch("sub/link", tc.target)})
			if err := os.MkdirAll(filepath.Join(f.tree, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(f.tree, "sub", "out")); err != nil {
				t.Fatal(err)
			}
			err := f.run(t)
			if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "sub/link") {
				t.Fatalf("Run error = %v; want a usage error naming sub/link and %q", err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(f.tree, "sub", "link")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("sub/link was made: %v", err)
			}
			if got := f.read(t, "a.txt"); got != baseA {
				t.Errorf("a.txt changed: %q", got)
			}
		})
	}
	// What the patch alone shows is refused at validate.
	f := newFixture(t, nil, [2]string{"0001-link.patch", newLinkPatch("link", "/etc/shadow")})
	if err := f.step.ReadFiles(f.env); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "is an absolute path") {
		t.Errorf("ReadFiles error = %v; want a usage error", err)
	}
}

func TestPatchModesClamped(t *testing.T) {
	newFile := func(name, mode string) string {
		return "diff --git a/" + name + " b/" + name + "\nnew file mode " + mode + "\n--- /dev/null\n+++ b/" + name + "\n@@ -0,0 +1 @@\n+x\n"
	}
	chmod := func(name, mode string) string {
		return "diff --git a/" + name + " b/" + name + "\nold mode 100644\nnew mode " + mode + "\n"
	}
	f := newFixture(t, map[string]string{"w.txt": "w\n", "s.sh": "s\n", "p.txt": "p\n"},
		[2]string{"1.patch", newFile("all.sh", "100777")},
		[2]string{"2.patch", newFile("rw.txt", "100666")},
		[2]string{"3.patch", newFile("suid", "104755")},
		[2]string{"4.patch", chmod("w.txt", "100777")},
		[2]string{"5.patch", chmod("s.sh", "106775")},
		[2]string{"6.patch", chmod("p.txt", "100600")},
	)
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"all.sh": 0o755, "rw.txt": 0o644, "suid": 0o755, "w.txt": 0o755, "s.sh": 0o755, "p.txt": 0o600} {
		fi, err := os.Lstat(filepath.Join(f.tree, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode = %v, want %v", name, fi.Mode(), want)
		}
	}
}

func TestPatchSubmoduleModeRefused(t *testing.T) {
	f := newFixture(t, nil, [2]string{"1.patch", "diff --git a/sub b/sub\nnew file mode 160000\nindex 0000000..1234567\n--- /dev/null\n+++ b/sub\n@@ -0,0 +1 @@\n+Subproject commit 1234567890123456789012345678901234567890\n"})
	if err := f.step.ReadFiles(f.env); !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), "mode 160000 is neither a regular file nor a symbolic link") {
		t.Errorf("ReadFiles error = %v; want a usage error", err)
	}
}

func TestPatchRetargetsSymlink(t *testing.T) {
	retarget := "diff --git a/l b/l\nindex 2e65efe..63d8dbd 120000\n--- a/l\n+++ b/l\n@@ -1 +1 @@\n-a.txt\n\\ No newline at end of file\n+b.txt\n\\ No newline at end of file\n"
	f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"1.patch", retarget})
	if err := os.Symlink("a.txt", filepath.Join(f.tree, "l")); err != nil {
		t.Fatal(err)
	}
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(f.tree, "l")); err != nil || target != "b.txt" {
		t.Errorf("l points to %q, %v; want b.txt", target, err)
	}
	// A text diff of a regular file does not apply to a link of that name.
	g := newFixture(t, map[string]string{"b.txt": baseA}, [2]string{"1.patch", patchA})
	if err := os.Symlink("b.txt", filepath.Join(g.tree, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := g.run(t); err == nil || !strings.Contains(err.Error(), "it is a symbolic link, but the patch changes a regular file") {
		t.Errorf("Run error = %v; want a conflict naming the link", err)
	}
	if got := g.read(t, "b.txt"); got != baseA {
		t.Errorf("the link's target changed: %q", got)
	}
}

// A patch may remove a link the tree has, whatever it points to (an upstream link to an
// absolute path): only the links a patch makes are checked.
func TestPatchRemovesAnUpstreamLink(t *testing.T) {
	remove := "diff --git a/l b/l\ndeleted file mode 120000\nindex 2e65efe..0000000\n--- a/l\n+++ /dev/null\n@@ -1 +0,0 @@\n-/usr/share/doc\n\\ No newline at end of file\n"
	f := newFixture(t, map[string]string{"a.txt": baseA}, [2]string{"1.patch", remove})
	if err := os.Symlink("/usr/share/doc", filepath.Join(f.tree, "l")); err != nil {
		t.Fatal(err)
	}
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(f.tree, "l")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("l is still there: %v", err)
	}
	if ok, why, err := f.step.Intact(context.Background(), f.env); !ok || err != nil {
		t.Errorf("Intact = %v, %q, %v", ok, why, err)
	}
	if err := f.run(t); err != nil {
		t.Errorf("second run: %v", err)
	}
}
