package patch

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// binaryPatch is `git diff --binary` of a new 11-byte file.
const binaryPatch = `diff --git a/x.bin b/x.bin
new file mode 100644
index 0000000000000000000000000000000000000000..82a730805dc10b812221b870902492c4c49ee7ce
GIT binary patch
literal 11
ScmZQzWJ=1+ODwAV{|^8Vz66E<

literal 0
HcmV?d00001

`

// Patches that go-gitdiff reads without an error, or with one that validate used to let
// through, are refused by validate and plan as bad input naming the patch file and line;
// apply never gets to them.
func TestMalformedPatchRefusedAtValidate(t *testing.T) {
	for _, tc := range []struct {
		name, patch, want string
	}{
		{"hunk counts too few lines", "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -2,2 +2,2 @@\n two\n-three\n+THREE\n four\n",
			`line 8: the hunk @@ -2,2 +2,2 @@ at line 4 counts 2 old and 2 new lines, but its lines go on (" four"): the hunk header miscounts lines`},
		{"hunk counts too many lines", "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -2,4 +2,4 @@\n two\n-three\n+THREE\n four\n",
			"line 8: the hunk @@ -2,4 +2,4 @@ at line 4 counts 4 old and 4 new lines, but the patch ends after 3 old and 3 new"},
		{"hunk runs into the next file", "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -2,4 +2,4 @@\n two\n-three\n+THREE\n four\n" + patchB,
			`line 9: the hunk @@ -2,4 +2,4 @@ at line 4 counts 4 old and 4 new lines, but "diff --git a/b.txt b/b.txt" comes after 3 old and 3 new`},
		{"corrupt binary literal", strings.Replace(binaryPatch, "ScmZQzWJ=1", "ScmZQzWK=1", 1),
			"line 5: binary patch of x.bin: corrupt data"},
		{"binary literal with a bad length", strings.Replace(binaryPatch, "ScmZQzWJ=1+ODwAV{|^8Vz66E<", "ScmZQzWJ=1+ODwAV{|^8Vz6", 1),
			"line 6: binary patch: corrupt data line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"a.txt": baseA, "b.txt": baseB}, [2]string{"0001-bad.patch", tc.patch})
			file := filepath.Join(f.recipe, "patches", "0001-bad.patch")
			err := f.step.ReadFiles(f.env)
			if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadFiles (validate) error = %v\nwant a usage error naming %s and %q", err, file, tc.want)
			}
			if _, err := f.step.Fingerprint(context.Background(), f.env); !errors.Is(err, exitcode.ErrUsage) {
				t.Errorf("Fingerprint (plan) error = %v; want a usage error", err)
			}
			if err := f.run(t); !errors.Is(err, exitcode.ErrUsage) {
				t.Errorf("Run error = %v; want a usage error", err)
			}
			if got := f.read(t, "a.txt"); got != baseA {
				t.Errorf("a.txt = %q after a refused patch", got)
			}
		})
	}
}

// Well-formed patches still pass: a signature after the last hunk, a deleted line that
// starts with "--", a missing final newline, a binary file.
func TestWellFormedPatchesParse(t *testing.T) {
	sig := patchA + "-- \n2.39.5\n\n"
	dashes := "diff --git a/s.sql b/s.sql\n--- a/s.sql\n+++ b/s.sql\n@@ -1,2 +1,1 @@\n x\n--- a comment\n"
	f := newFixture(t, map[string]string{"a.txt": baseA, "d.txt": "p\nq", "s.sql": "x\n-- a comment\n"},
		[2]string{"1.patch", sig}, [2]string{"2.patch", patchNoEOL}, [2]string{"3.patch", dashes}, [2]string{"4.patch", binaryPatch})
	if err := f.step.ReadFiles(f.env); err != nil {
		t.Fatal(err)
	}
	if err := f.run(t); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, "x.bin"); got != "\x00\x01\x02binary\xff\xfe" {
		t.Errorf("x.bin = %q", got)
	}
	if got := f.read(t, "s.sql"); got != "x\n" {
		t.Errorf("s.sql = %q", got)
	}
}

// parsePatch never panics, and what it accepts go-gitdiff parses.
func FuzzParsePatch(f *testing.F) {
	for _, p := range []string{patchA, patchB, patchAB, patchNewDelete, patchCRLF, patchNoEOL, binaryPatch,
		"diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -2,2 +2,2 @@\n two\n-three\n+THREE\n four\n"} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		files, err := parsePatch(raw)
		if err != nil {
			var le *lineError
			if errors.As(err, &le) && le.Line < 0 {
				t.Fatalf("negative line in %v", err)
			}
			return
		}
		if _, _, err := gitdiff.Parse(bytes.NewReader(raw)); err != nil {
			t.Fatalf("parsePatch accepted what go-gitdiff refuses: %v (%d files)", err, len(files))
		}
	})
}
