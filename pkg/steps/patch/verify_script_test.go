package patch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyPatchesScript runs .ci/verify-patches (make verify-patches) against a real git
// upstream served over file:// with partial fetches allowed, as GitHub serves the pinned
// SGLang commit: the series applies at its commit and fails at a commit where its context
// moved; an upstream that cannot be reached is a skip with its reason, or a failure with
// VERIFY_PATCHES_REQUIRE=1.
func TestVerifyPatchesScript(t *testing.T) {
	if testing.Short() {
		t.Skip("runs git and a nested go test")
	}
	for _, tool := range []string{"git", "bash", "go", "timeout", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	repoRoot, _ := filepath.Abs("../../..")
	script := filepath.Join(repoRoot, ".ci", "verify-patches")
	dir := t.TempDir()
	up := filepath.Join(dir, "upstream")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", up, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(path, text string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(up, 0o755)
	git("init", "-q")
	write(filepath.Join(up, "python/x/m.py"), "A = 1\nB = 2\nC = 3\n")
	write(filepath.Join(up, "untouched.txt"), "not fetched\n")
	git("add", "-A")
	git("commit", "-qm", "base")
	pinned := git("rev-parse", "HEAD")
	write(filepath.Join(up, "python/x/m.py"), "A = 1\nB = 20\nC = 3\n")
	write(filepath.Join(up, "scripts/new.py"), "created by the series\n")
	git("add", "-A")
	git("commit", "-qm", "the change the series makes")
	patchText := git("format-patch", "-1", "HEAD", "--stdout") + "\n"
	series := func(name, commit string) string {
		d := filepath.Join(dir, name, commit[:12])
		write(filepath.Join(d, "0001-change.patch"), patchText)
		write(filepath.Join(d, "series"), "# a test series at\n# "+commit+"\n0001-change.patch\n")
		return filepath.Join(dir, name)
	}
	good := series("good", pinned)
	git("reset", "-q", "--hard", pinned)
	write(filepath.Join(up, "python/x/m.py"), "A = 1\nB = 5\nC = 3\n")
	git("commit", "-qam", "upstream moved on")
	bad := series("bad", git("rev-parse", "HEAD"))
	git("config", "uploadpack.allowFilter", "true")
	git("config", "uploadpack.allowAnySHA1InWant", "true")

	run := func(url, patches string, env ...string) (string, int) {
		cmd := exec.Command(script)
		cmd.Env = append(os.Environ(), append([]string{"SGLANG_URL=" + url, "PATCHES_DIR=" + patches, "COUNTS="}, env...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := run("file://"+up, good); code != 0 || !strings.Contains(out, "fetching 1 files") || !strings.Contains(out, ": 1 passed, 0 failed, 0 skipped") {
		t.Errorf("the series at its commit: exit %d\n%s", code, out)
	}
	if out, code := run("file://"+up, bad); code == 0 || !strings.Contains(out, `expected "B = 2", found "B = 5"`) {
		t.Errorf("the series where its context moved: exit %d\n%s", code, out)
	}
	gone := "file://" + filepath.Join(dir, "no-such-repo")
	if out, code := run(gone, good); code != 0 || !strings.Contains(out, "patches: skipped: "+gone+" cannot be reached") {
		t.Errorf("an unreachable upstream: exit %d\n%s", code, out)
	}
	if out, code := run(gone, good, "VERIFY_PATCHES_REQUIRE=1"); code == 0 {
		t.Errorf("an unreachable upstream with VERIFY_PATCHES_REQUIRE=1: exit 0\n%s", out)
	}
}
