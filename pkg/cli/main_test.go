package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
)

// mainEnv makes the test binary run Main instead of the tests (for a run as another user).
const mainEnv = "SGLPROV_CLI_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(Main(append([]string{"sglprov"}, os.Args[1:]...), IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
	}
	os.Exit(m.Run())
}

// run calls Main with args and returns its exit code, stdout and stderr.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code := Main(append([]string{"sglprov"}, args...), IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: getenv})
	return code, stdout.String(), stderr.String()
}

func writeRecipe(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Ctrl-C during an apply stops the running step and exits 130, as shells expect.
func TestInterruptExits130(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	recipe := writeRecipe(t, dir, `apiVersion: sglprov/v1
name: slow
steps:
  - name: slow
    command: {argv: [sh, -c, "touch `+started+`; exec sleep 60"]}
`)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		code := Main([]string{"sglprov", "apply", "-f", recipe, "--state-dir", filepath.Join(dir, "st")},
			IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }})
		done <- code
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Main has caught SIGINT since before the step started.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != ExitInterrupted {
			t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitInterrupted, stderr.String())
		}
		// A command step is not a build: the interruption names the command and the signal.
		if out := stderr.String(); strings.Contains(out, "build of") || !strings.Contains(out, "running sh: stopped by SIGINT") {
			t.Errorf("the interrupted command step is not named as a stopped command:\n%s", out)
		}
		// The report and status say the exit code the shell saw.
		rep, err := engine.LatestReport(filepath.Join(dir, "st"))
		if err != nil || rep.ExitCode != ExitInterrupted || rep.Result != engine.ResultInterrupted {
			t.Errorf("report: %+v, %v; want exit %d, result %s", rep, err, ExitInterrupted, engine.ResultInterrupted)
		}
		if code, out, _ := run(t, nil, "status", "--state-dir", filepath.Join(dir, "st")); code != ExitInterrupted || !strings.Contains(out, "exit 130") {
			t.Errorf("status exited %d, want %d:\n%s", code, ExitInterrupted, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("apply did not stop after SIGINT")
	}
}

// --set without "=" is bad usage that says KEY=VALUE, not a problem in the recipe.
func TestSetWithoutEqualsIsUsage(t *testing.T) {
	dir := t.TempDir()
	recipe := writeRecipe(t, dir, "apiVersion: sglprov/v1\nname: r\nvars: {foo: x}\nsteps:\n  - name: a\n    command: {argv: [\"true\"]}\n")
	for _, cmd := range []string{"validate", "plan", "apply", "smoke"} {
		code, _, stderr := run(t, nil, cmd, "--set", "foo", "-f", recipe)
		if code != exitcode.ExitUsage {
			t.Errorf("%s: exit %d, want 2", cmd, code)
		}
		if !strings.Contains(stderr, `invalid value "foo" for flag --set: want KEY=VALUE`) || strings.Contains(stderr, "problem") {
			t.Errorf("%s: stderr %q does not say KEY=VALUE (or blames the recipe)", cmd, stderr)
		}
	}
}

// A user who is not root, on the default state dir, is told that root (or --state-dir)
// is needed.
func TestNonRootStateDirSaysRootIsNeeded(t *testing.T) {
	// Not t.TempDir: its parent is closed to other users.
	dir, err := os.MkdirTemp("", "sglprov-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	recipe := writeRecipe(t, dir, "apiVersion: sglprov/v1\nname: r\nsteps:\n  - name: a\n    command: {argv: [\"true\"]}\n")
	if fi, err := os.Stat(DefaultStateDir); err == nil && os.Geteuid() != 0 && fi.Mode().Perm()&0o002 != 0 {
		t.Skipf("%s is writable by everyone here", DefaultStateDir)
	}
	// The test binary, where another user may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sglprov")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every folder above dir must let the other user through.
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is closed to other users", d)
		}
	}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"default", "the state dir " + DefaultStateDir + " is root's: run as root (sudo sglprov ...), or give --state-dir DIR", nil},
		{"chosen", "cannot use the state dir /var/lib/sglprov-test-nobody", []string{"--state-dir", "/var/lib/sglprov-test-nobody"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"apply", "-f", recipe}, tc.args...)...)
			cmd.Env = []string{mainEnv + "=1", "PATH=/usr/bin:/bin"}
			cmd.Dir = dir
			if os.Geteuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			out, err := cmd.CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != exitcode.ExitFailed {
				t.Fatalf("exit: %v, want 1; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}

// With --log-format json or logfmt every line sglprov writes to stderr is a record of that
// format, the command's final error too: a log shipper that reads JSON lines must not meet
// a plain-text line (or an empty one) at the end of a failed run.
func TestFailedRunLogsItsErrorInTheLogFormat(t *testing.T) {
	dir := t.TempDir()
	recipe := writeRecipe(t, dir, `apiVersion: sglprov/v1
name: failing
steps:
  - name: broken
    command: {argv: [sh, -c, "echo 'fatal: broken' >&2; exit 7"]}
`)
	for _, format := range []string{"json", "logfmt"} {
		t.Run(format, func(t *testing.T) {
			code, _, stderr := run(t, nil, "apply", "-f", recipe, "--state-dir", filepath.Join(dir, "st-"+format), "--log-format", format)
			if code != exitcode.ExitFailed {
				t.Fatalf("exit %d, want %d\n%s", code, exitcode.ExitFailed, stderr)
			}
			var last map[string]any
			for i, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
				rec := map[string]any{}
				switch format {
				case "json":
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatalf("stderr line %d is not JSON: %q\n%s", i+1, line, stderr)
					}
				case "logfmt":
					if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") {
						t.Fatalf("stderr line %d is not a logfmt record: %q\n%s", i+1, line, stderr)
					}
					rec["line"] = line
				}
				last = rec
			}
			if format == "json" && (last["level"] != "error" || !strings.Contains(fmt.Sprint(last["err"]), "step broken") ||
				last["exit_code"] != float64(exitcode.ExitFailed)) {
				t.Errorf("the last record is not the run's error with its exit code: %v", last)
			}
		})
	}
}
