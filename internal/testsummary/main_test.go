package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummaryOfARealGoTest runs `go test -json` on a small module (tests that pass, skip
// with a reason, fail, have subtests, and a package that does not build) and reads its
// stream: the counts of the leaf tests, the skipped ones by name with their reason, the
// failed test's output shown and the passing ones' not, and a failure overall.
func TestSummaryOfARealGoTest(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on the PATH")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"a/a_test.go": `package a

import "testing"

func TestPass(t *testing.T) { t.Log("quiet when it passes") }
func TestSkip(t *testing.T) { t.Skip("needs a GPU") }
func TestFail(t *testing.T) { t.Error("the disk is on fire") }
func TestSubs(t *testing.T) {
	t.Run("one", func(t *testing.T) {})
	t.Run("two", func(t *testing.T) { t.Skip("not here") })
}
`,
		"b/b_test.go": "package b\n\nimport \"testing\"\n\nfunc TestBroken(t *testing.T) { undefined() }\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	stream, _ := cmd.Output() // it fails: a test fails and a package does not build
	var out bytes.Buffer
	s, err := summarize(bytes.NewReader(stream), &out)
	if err != nil {
		t.Fatal(err)
	}
	s.write(&out, "unit")
	text := out.String()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if last := lines[len(lines)-1]; last != "unit: 2 passed, 2 failed, 2 skipped" {
		t.Errorf("last line %q, want the counts of the leaf tests and the broken package\n%s", last, text)
	}
	for _, want := range []string{
		"unit: skipped example.com/m/a TestSkip: needs a GPU\n",
		"unit: skipped example.com/m/a TestSubs/two: not here\n",
		"the disk is on fire",
		"undefined: undefined",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "quiet when it passes") {
		t.Errorf("a passing test's output was shown:\n%s", text)
	}
	if !s.failed() {
		t.Error("a stream with a failed test and a broken package did not fail")
	}
}

// TestTotalSumsTheSuites: the recorded counts of every suite add up to the last line.
func TestTotalSumsTheSuites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counts")
	for _, rec := range []struct {
		suite string
		s     *summary
	}{
		{"unit", &summary{results: map[key]string{{"p", "TestA"}: "pass", {"p", "TestB"}: "skip"}}},
		{"e2e", &summary{results: map[key]string{{"q", "TestC"}: "pass"}, pkgFailed: map[string]bool{"r": true}}},
	} {
		if err := appendRecord(path, rec.suite, rec.s); err != nil {
			t.Fatal(err)
		}
	}
	line, err := sumRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	if line != "2 passed, 1 failed, 1 skipped" {
		t.Errorf("total %q", line)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the record file is still there: %v", err)
	}
}

// TestTotalDoesNotCountAsSkippedWhatAnotherSuiteRan: the e2e tests skip themselves in the
// unit suite (no -e2e there) and run in the e2e suite of the same make test: the total
// counts them once, as run, not also as skipped, and says how many it left out; a test
// skipped everywhere stays skipped.
func TestTotalDoesNotCountAsSkippedWhatAnotherSuiteRan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counts")
	for _, rec := range []struct {
		suite string
		s     *summary
	}{
		{"unit", &summary{results: map[key]string{{"p", "TestA"}: "pass", {"e2e", "TestApply"}: "skip", {"e2e", "TestDaemon"}: "skip", {"p", "TestGPU"}: "skip"}}},
		{"e2e", &summary{results: map[key]string{{"e2e", "TestApply"}: "pass", {"e2e", "TestApply/rerun"}: "pass", {"e2e", "TestDaemon"}: "fail"}}},
	} {
		if err := appendRecord(path, rec.suite, rec.s); err != nil {
			t.Fatal(err)
		}
	}
	line, err := sumRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "2 passed, 1 failed, 1 skipped (not counted as skipped: 2 tests skipped in one suite and run in another)"; line != want {
		t.Errorf("total %q, want %q", line, want)
	}
}
