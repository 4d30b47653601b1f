package hostcmd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/recipe"
)

// TestKnownNamesAreTheRecipes: the commands whose version this package reads are the ones
// a recipe may give a version range (recipe.VersionedCommands), and no others.
func TestKnownNamesAreTheRecipes(t *testing.T) {
	if got, want := strings.Join(KnownNames(), ","), strings.Join(recipe.VersionedCommands, ","); got != want {
		t.Errorf("KnownNames() = %s; recipe.VersionedCommands = %s: keep the two lists equal", got, want)
	}
}

// TestParseVersionRealOutputs reads each command's version from its real --version output,
// captured into testdata (the file name says the command and the version it printed).
func TestParseVersionRealOutputs(t *testing.T) {
	for _, tc := range []struct {
		file, cmd, want string
	}{
		{"nvcc-12.8.93.txt", "nvcc", "12.8.93"},
		{"nvcc-13.0.88.txt", "nvcc", "13.0.88"}, // captured on the H200 host, /usr/local/cuda/bin/nvcc
		{"python3-3.11.2-debian12.txt", "python3", "3.11.2"},
		{"python3-3.11.7-pyenv.txt", "python3", "3.11.7"},
		{"git-2.39.5-debian12.txt", "git", "2.39.5"},
		{"cmake-3.25.1-debian12.txt", "cmake", "3.25.1"},
		{"gcc-12.2.0-debian12.txt", "gcc", "12.2.0"},
		{"g++-12.2.0-debian12.txt", "g++", "12.2.0"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			out, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseVersion(tc.cmd, string(out))
			if err != nil {
				t.Fatalf("ParseVersion(%s): %v", tc.cmd, err)
			}
			if got != tc.want {
				t.Errorf("ParseVersion(%s) = %q, want %q", tc.cmd, got, tc.want)
			}
		})
	}
}

func TestParseVersionOtherShapes(t *testing.T) {
	for _, tc := range []struct {
		name, cmd, out, want string
	}{
		{"gcc red hat", "gcc", "gcc (GCC) 11.4.1 20231218 (Red Hat 11.4.1-3)\nCopyright", "11.4.1"},
		{"gcc ubuntu", "gcc", "gcc (Ubuntu 13.2.0-23ubuntu4) 13.2.0\n", "13.2.0"},
		{"git apple", "git", "git version 2.39.3 (Apple Git-145)\n", "2.39.3"},
		{"nvcc release only", "nvcc", "Cuda compilation tools, release 11.0\n", "11.0"},
		{"python2 on stderr", "python", "Python 2.7.18\n", "2.7.18"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVersion(tc.cmd, tc.out)
			if err != nil || got != tc.want {
				t.Errorf("ParseVersion(%s, %q) = %q, %v; want %q", tc.cmd, tc.out, got, err, tc.want)
			}
		})
	}
	if _, err := ParseVersion("nvcc", "command not found\n"); err == nil || !strings.Contains(err.Error(), `"command not found"`) {
		t.Errorf("nvcc garbage: err = %v, want one quoting the output", err)
	}
	if _, err := ParseVersion("rustc", "rustc 1.85.0"); err == nil {
		t.Error("unknown command: no error")
	}
}

// fakeBin writes an executable script name under dir that prints out for --version.
func fakeBin(t *testing.T, dir, name, out string) {
	t.Helper()
	script := "#!/bin/sh\nexec /bin/cat <<'EOF'\n" + out + "EOF\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestCheckListsEveryProblemWithItsFix(t *testing.T) {
	dir := t.TempDir()
	nvcc12, _ := os.ReadFile("testdata/nvcc-12.8.93.txt")
	fakeBin(t, dir, "nvcc", strings.Replace(string(nvcc12), "12.8, V12.8.93", "12.4, V12.4.131", 1))
	git, _ := os.ReadFile("testdata/git-2.39.5-debian12.txt")
	fakeBin(t, dir, "git", string(git))
	fakeBin(t, dir, "weird", "no version here\n")
	reqs := recipe.CommandRequirements{
		"nvcc":   {Version: ">=12.8"},
		"git":    {Version: ">=2.30"},
		"cmake":  {Version: ">=3.26"},
		"ninja":  {},
		"weird":  {},
		"python": {},
	}
	look := PathLooker{Path: dir}
	res := Check(context.Background(), reqs, map[string]string{"ninja": "host-packages"}, look)
	got := map[string]Result{}
	for _, r := range res {
		got[r.Name] = r
	}
	if r := got["nvcc"]; !strings.Contains(r.Problem, "12.4.131 at "+dir+"/nvcc does not satisfy >=12.8") || !strings.Contains(r.Problem, "NVIDIA's apt repository") {
		t.Errorf("nvcc: %+v", r)
	}
	if r := got["git"]; !r.OK() || r.Version != "2.39.5" {
		t.Errorf("git: %+v", r)
	}
	if r := got["cmake"]; !strings.Contains(r.Problem, "not found on the PATH; install it (apt-get install cmake)") {
		t.Errorf("cmake: %+v", r)
	}
	if r := got["ninja"]; !r.OK() || r.InstalledBy != "host-packages" || r.String() != "ninja: not on the PATH yet; step host-packages installs it" {
		t.Errorf("ninja: %+v %q", r, r.String())
	}
	if r := got["weird"]; !r.OK() || r.Path != dir+"/weird" {
		t.Errorf("weird (presence only): %+v", r)
	}
	probs := Problems(res)
	if len(probs) != 3 {
		t.Errorf("problems = %q, want nvcc, cmake and python", probs)
	}
}

func TestCheckTooOldButInstalledByAStep(t *testing.T) {
	dir := t.TempDir()
	fakeBin(t, dir, "cmake", "cmake version 3.22.1\n")
	res := Check(context.Background(), recipe.CommandRequirements{"cmake": {Version: ">=3.26"}}, map[string]string{"cmake": "host-packages"}, PathLooker{Path: dir})
	if !res[0].OK() || res[0].InstalledBy != "host-packages" || res[0].String() != "cmake >=3.26: 3.22.1 at "+dir+"/cmake now; step host-packages installs it" {
		t.Errorf("cmake too old but provided: %+v", res[0])
	}
}

func TestCommandsOf(t *testing.T) {
	for pkg, want := range map[string]string{
		"build-essential":   "c++ cc g++ gcc make",
		"git":               "git",
		"cuda-toolkit-13-0": "nvcc",
		"python3-venv":      "python3",
		"libnuma-dev":       "",
		"git=1:2.39.5-0":    "git",
	} {
		if got := strings.Join(CommandsOf(pkg), " "); got != want {
			t.Errorf("CommandsOf(%s) = %q, want %q", pkg, got, want)
		}
	}
}

// TestNVCCOffThePath: NVIDIA's packages put nvcc in /usr/local/cuda/bin, off the PATH;
// it is found there, or under $CUDA_HOME/bin first.
func TestNVCCOffThePath(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "bin"), 0o755)
	out, _ := os.ReadFile("testdata/nvcc-13.0.88.txt")
	fakeBin(t, filepath.Join(home, "bin"), "nvcc", string(out))
	empty := t.TempDir()
	l := PathLooker{Path: empty, Getenv: func(k string) string {
		if k == "CUDA_HOME" {
			return home
		}
		return ""
	}}
	f := l.Lookup(context.Background(), "nvcc")
	if f.Path != filepath.Join(home, "bin", "nvcc") || f.Version != "13.0.88" {
		t.Errorf("nvcc under CUDA_HOME: %+v", f)
	}
	if got := CUDADirs(func(string) string { return "" }); len(got) != 1 || got[0] != "/usr/local/cuda/bin" {
		t.Errorf("CUDADirs without env = %q", got)
	}
	// Other commands are looked for on the PATH only.
	fakeBin(t, filepath.Join(home, "bin"), "cmake", "cmake version 3.28.3\n")
	if f := l.Lookup(context.Background(), "cmake"); f.Path != "" {
		t.Errorf("cmake found off the PATH: %+v", f)
	}
}

// TestLookupOfAHangingCommand: a --version that never returns is ended after Timeout, with
// the processes it started, and the problem says so in words.
func TestLookupOfAHangingCommand(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := "#!/bin/sh\n/bin/sleep 300 &\necho $! > " + pidFile + "\n/bin/sleep 300\n"
	if err := os.WriteFile(filepath.Join(dir, "git"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f := PathLooker{Path: dir, Timeout: 300 * time.Millisecond}.Lookup(context.Background(), "git")
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Lookup took %s with a 300ms limit", took)
	}
	if f.Path == "" || f.Version != "" || !strings.Contains(f.Err, "did not finish within 300ms") {
		t.Errorf("Lookup = %+v", f)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(2 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the --version run's child %d outlived it", pid)
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// TestCheckInstalled: after a step installed them, the commands it installed are checked
// against the recipe's ranges, with a newer package source as the fix; commands the recipe
// does not require, or that the step did not install, are not looked at.
func TestCheckInstalled(t *testing.T) {
	dir := t.TempDir()
	fakeBin(t, dir, "cmake", "cmake version 3.22.1\n")
	fakeBin(t, dir, "git", "git version 2.34.1\n")
	fakeBin(t, dir, "nvcc", "Cuda compilation tools, release 12.0, V12.0.140\n")
	reqs := recipe.CommandRequirements{"cmake": {Version: ">=3.26"}, "git": {Version: ">=2.30"}, "nvcc": {Version: ">=12.8"}, "ninja": {}, "make": {}}
	got := CheckInstalled(context.Background(), reqs, []string{"nvcc", "git", "cmake", "ninja", "gcc"}, PathLooker{Path: dir})
	want := []string{
		"cmake: the packages installed 3.22.1 at " + filepath.Join(dir, "cmake") + ", which does not satisfy >=3.26; the host's package sources have no cmake >=3.26: add a newer package source (a PPA or the vendor's apt repository, e.g. Kitware's apt repository) in the host's image or cloud-init, then run again",
		"ninja: still not found on the PATH after installing its packages; put the folder that has it on the PATH, or list the package that installs it",
		"nvcc: the packages installed 12.0.140 at " + filepath.Join(dir, "nvcc") + ", which does not satisfy >=12.8; the host's package sources have no CUDA toolkit >=12.8: add NVIDIA's apt repository, list a toolkit in range in apt: (e.g. cuda-toolkit-13-0) and put /usr/local/cuda/bin first on the PATH (see docs/cloud-init.md)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("CheckInstalled =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
