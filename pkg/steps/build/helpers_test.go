package build

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of the output copier and
// the progress reporter.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const gb = uint64(1) << 30

// fixedHost returns host facts with the given cores and available memory.
func fixedHost(cores int, mem uint64) hostInfo {
	return hostInfo{
		cores:        func() int { return cores },
		memAvailable: func() (uint64, error) { return mem, nil },
	}
}

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeTools puts a folder of fake toolchain programs first on PATH and returns it. The
// rest of PATH is kept only for the system programs the tests use (sh, git, sleep).
func fakeTools(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+"/usr/local/bin:/usr/bin:/bin")
	return dir
}

// fakeNVCC writes an nvcc that reports release.
func fakeNVCC(t *testing.T, bin, release string) {
	writeScript(t, filepath.Join(bin, "nvcc"), `echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release `+release+`"
`)
}

// fakePython writes a python3 that reports its version and a torch version.
func fakePython(t *testing.T, bin, version, torch string) {
	writeScript(t, filepath.Join(bin, "python3"), `case "$1" in
--version) echo "Python `+version+`" ;;
-c) echo "`+torch+`" ;;
*) exit 2 ;;
esac
`)
}

func facts(cc, driver string) *gpu.Facts {
	return &gpu.Facts{DriverVersion: driver, CUDADriverVersion: 13000,
		GPUs: []gpu.Device{{Index: 0, Name: "NVIDIA RTX PRO 6000 Blackwell Server Edition", ComputeCapability: cc}}}
}

// testEnv returns an engine.Env with its output, console and log in buffers.
func testEnv(t *testing.T) (*engine.Env, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	out, console := &lockedBuffer{}, &lockedBuffer{}
	env := engine.NewTestEnv(t.TempDir(), out)
	env.Console = console
	env.Log = log.New(console)
	env.LogPath = filepath.Join(env.StateDir, "runs", "test.log")
	env.Facts = facts("12.0", "580.95.05")
	return env, out, console
}

// newStep builds a step with a fixed host (16 cores, 64 GiB) and quick timers.
func newStep(t *testing.T, spec Spec) *Step {
	t.Helper()
	s, err := New("kernel", &spec)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.host = fixedHost(16, 64*gb)
	// The host may have a real ccache; tests that want one write a fake and set "ccache".
	s.ccache = "ccache-not-in-tests"
	return s
}

// git runs git in dir.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com",
		"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
