package build

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/steps/stepexec"
)

func TestJobCount(t *testing.T) {
	// want[cores][memGiB][perJob]
	want := map[int]map[uint64]map[float64]int{
		2:   {8: {4: 2, 8: 1}, 24: {4: 2, 8: 2}, 512: {4: 2, 8: 2}},
		16:  {8: {4: 2, 8: 1}, 24: {4: 6, 8: 3}, 512: {4: 16, 8: 16}},
		128: {8: {4: 2, 8: 1}, 24: {4: 6, 8: 3}, 512: {4: 128, 8: 64}},
	}
	for _, cores := range []int{2, 16, 128} {
		for _, mem := range []uint64{8, 24, 512} {
			for _, per := range []float64{4, 8} {
				t.Run(fmt.Sprintf("cores=%d/mem=%dGiB/per-job=%gGiB", cores, mem, per), func(t *testing.T) {
					if got := JobCount(cores, mem*gb, per); got != want[cores][mem][per] {
						t.Errorf("JobCount = %d, want %d", got, want[cores][mem][per])
					}
				})
			}
		}
	}
	edges := []struct {
		name  string
		cores int
		mem   uint64
		per   float64
		want  int
	}{
		{"less memory than one job", 16, 3 * gb, 4, 1},
		{"no cores reported", 0, 64 * gb, 4, 1},
		{"just under two jobs", 16, 8*gb - 1, 4, 1},
		{"fractional per-job budget", 16, 5 * gb, 2.5, 2},
		{"zero per-job uses the default", 16, 16 * gb, 0, 4},
	}
	for _, tc := range edges {
		t.Run(tc.name, func(t *testing.T) {
			if got := JobCount(tc.cores, tc.mem, tc.per); got != tc.want {
				t.Errorf("JobCount = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestReadMemAvailable(t *testing.T) {
	tests := []struct {
		name, content string
		want          uint64
		wantErr       bool
	}{
		{"available", "MemTotal:       24683656 kB\nMemFree: 1 kB\nMemAvailable:   24452724 kB\n", 24452724 * 1024, false},
		{"total only", "MemTotal:       1024 kB\nMemFree: 1 kB\n", 1024 * 1024, false},
		{"neither", "MemFree: 1 kB\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "meminfo")
			writeFile(t, p, tc.content)
			got, err := readMemAvailable(p)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("readMemAvailable = %d, %v; want %d, error %t", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"no dir", Spec{Argv: []string{"make"}}, "dir is empty"},
		{"no argv", Spec{Dir: "/src"}, "argv is empty"},
		{"bad glob", Spec{Dir: "/src", Argv: []string{"make"}, Outputs: []string{"dist/[.whl"}}, "glob"},
		{"empty probe", Spec{Dir: "/src", Argv: []string{"make"}, Probes: [][]string{{}}}, "probes[0] is empty"},
		{"negative memory", Spec{Dir: "/src", Argv: []string{"make"}, MemPerJobGiB: -1}, "mem_per_job_gib"},
		{"negative jobs", Spec{Dir: "/src", Argv: []string{"make"}, Jobs: -2}, "jobs is negative"},
		{"bad env name", Spec{Dir: "/src", Argv: []string{"make"}, Env: map[string]string{"A=B": "c"}}, "env name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New("k", &tc.spec)
			if err == nil || !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error = %v, want ErrUsage mentioning %q", err, tc.want)
			}
		})
	}
	step, err := Kind().New("k", &Spec{Dir: "/src", Argv: []string{"make"}})
	if err != nil || step == nil {
		t.Fatalf("Kind().New = %v, %v", step, err)
	}
	if _, ok := Kind().NewSpec().(*Spec); !ok {
		t.Error("NewSpec does not return *Spec")
	}
}

// readEnvDump parses the `env` output a fake build wrote.
func readEnvDump(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	return vars
}

func TestRunEnvironment(t *testing.T) {
	keys := []string{"TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", "SGL_KERNEL_COMPILE_THREADS",
		"CCACHE_DIR", "CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER", "FROM_PROCESS"}
	tests := []struct {
		name   string
		cc     string
		ccache bool
		spec   Spec
		host   hostInfo
		want   map[string]string // "" means unset
	}{
		{"SM120 defaults", "12.0", false, Spec{}, fixedHost(16, 24*gb), map[string]string{
			"TORCH_CUDA_ARCH_LIST": "12.0a", "MAX_JOBS": "6", "CMAKE_BUILD_PARALLEL_LEVEL": "6",
			"SGL_KERNEL_COMPILE_THREADS": "1", "FROM_PROCESS": "yes"}},
		{"H200, 8 GiB per job", "9.0", false, Spec{MemPerJobGiB: 8}, fixedHost(128, 512*gb), map[string]string{
			"TORCH_CUDA_ARCH_LIST": "9.0a", "MAX_JOBS": "64", "CMAKE_BUILD_PARALLEL_LEVEL": "64",
			"SGL_KERNEL_COMPILE_THREADS": "1", "FROM_PROCESS": "yes"}},
		{"recipe env and jobs override", "12.0", false, Spec{Jobs: 3, Env: map[string]string{
			"TORCH_CUDA_ARCH_LIST": "12.0a;9.0a", "SGL_KERNEL_COMPILE_THREADS": "4", "FROM_PROCESS": "recipe"}},
			fixedHost(16, 512*gb), map[string]string{
				"TORCH_CUDA_ARCH_LIST": "12.0a;9.0a", "MAX_JOBS": "3", "CMAKE_BUILD_PARALLEL_LEVEL": "3",
				"SGL_KERNEL_COMPILE_THREADS": "4", "FROM_PROCESS": "recipe"}},
		{"ccache on PATH", "12.0", true, Spec{}, fixedHost(2, 512*gb), map[string]string{
			"TORCH_CUDA_ARCH_LIST": "12.0a", "MAX_JOBS": "2", "CMAKE_BUILD_PARALLEL_LEVEL": "2",
			"SGL_KERNEL_COMPILE_THREADS": "1", "CCACHE_DIR": "STATE/ccache", "CMAKE_C_COMPILER_LAUNCHER": "ccache",
			"CMAKE_CXX_COMPILER_LAUNCHER": "ccache", "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache", "FROM_PROCESS": "yes"}},
		{"no GPU facts, the recipe sets the arch list", "", false, Spec{Env: map[string]string{"TORCH_CUDA_ARCH_LIST": "9.0a"}}, fixedHost(16, 64*gb), map[string]string{
			"TORCH_CUDA_ARCH_LIST": "9.0a", "MAX_JOBS": "16", "CMAKE_BUILD_PARALLEL_LEVEL": "16", "SGL_KERNEL_COMPILE_THREADS": "1", "FROM_PROCESS": "yes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bin := fakeTools(t)
			for _, k := range keys {
				// A CUDA image may set some of these (TORCH_CUDA_ARCH_LIST); start without.
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			t.Setenv("FROM_PROCESS", "yes")
			if tc.ccache {
				writeScript(t, filepath.Join(bin, "ccache"), "exec \"$@\"\n")
			}
			src := t.TempDir()
			writeScript(t, filepath.Join(src, "build.sh"), "mkdir -p out && env > out/env.txt\n")
			env, _, _ := testEnv(t)
			env.Facts = nil
			if tc.cc != "" {
				env.Facts = facts(tc.cc, "580.95.05")
			}
			spec := tc.spec
			spec.Dir, spec.Argv, spec.Outputs = src, []string{"./build.sh"}, []string{"out/env.txt"}
			s := newStep(t, spec)
			s.host = tc.host
			if tc.ccache {
				s.ccache = "ccache"
			}
			if err := s.Run(context.Background(), env); err != nil {
				t.Fatalf("Run: %v", err)
			}
			vars := readEnvDump(t, filepath.Join(src, "out", "env.txt"))
			got := map[string]string{}
			for _, k := range keys {
				if v := vars[k]; v != "" {
					got[k] = strings.ReplaceAll(v, env.StateDir, "STATE")
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("build environment (-want +got):\n%s", diff)
			}
			if tc.ccache {
				if fi, err := os.Stat(filepath.Join(env.StateDir, "ccache")); err != nil || !fi.IsDir() {
					t.Errorf("ccache dir not created: %v", err)
				}
			}
		})
	}
}

func TestRunFailureShowsTail(t *testing.T) {
	fakeTools(t)
	src := t.TempDir()
	writeScript(t, filepath.Join(src, "build.sh"), `i=1
while [ $i -le 100 ]; do echo "line $i"; i=$((i+1)); done
echo "fatal: out of memory" >&2
exit 3
`)
	env, out, _ := testEnv(t)
	s := newStep(t, Spec{Dir: src, Argv: []string{"./build.sh"}, Outputs: []string{"never/*"}})
	err := s.Run(context.Background(), env)
	var f *stepexec.Failure
	if !errors.As(err, &f) {
		t.Fatalf("Run error = %v (%T), want *Failure", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"exit status 3", "last 40 lines", "line 62\n", "line 100\n", "fatal: out of memory",
		"full log: " + env.LogPath} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "line 61\n") {
		t.Errorf("error shows more than 40 lines:\n%s", msg)
	}
	if len(f.Tail) != 40 || f.Tail[0] != "line 62" || f.Tail[39] != "fatal: out of memory" {
		t.Errorf("Tail = %q…, %d lines", f.Tail[:1], len(f.Tail))
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("error does not unwrap to exit code 3: %v", err)
	}
	if got := strings.Count(out.String(), "\n"); got != 101 {
		t.Errorf("step log has %d lines, want all 101", got)
	}
}

func TestRunMissingCommand(t *testing.T) {
	fakeTools(t)
	env, _, _ := testEnv(t)
	s := newStep(t, Spec{Dir: t.TempDir(), Argv: []string{"no-such-build-tool"}})
	if err := s.Run(context.Background(), env); err == nil || !strings.Contains(err.Error(), "no-such-build-tool") {
		t.Errorf("Run = %v, want an error naming the command", err)
	}
	s = newStep(t, Spec{Dir: filepath.Join(t.TempDir(), "absent"), Argv: []string{"make"}})
	if err := s.Run(context.Background(), env); err == nil || !strings.Contains(err.Error(), "build dir") {
		t.Errorf("Run = %v, want an error about the build dir", err)
	}
}

func TestRunSucceededWithoutOutputs(t *testing.T) {
	fakeTools(t)
	src := t.TempDir()
	writeScript(t, filepath.Join(src, "build.sh"), "echo done\n")
	env, _, _ := testEnv(t)
	s := newStep(t, Spec{Dir: src, Argv: []string{"./build.sh"}, Outputs: []string{"dist/*.whl"}})
	err := s.Run(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), `made no file matching output "dist/*.whl"`) {
		t.Errorf("Run = %v, want an error naming the output", err)
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestRunCancelKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name   string
		script string
	}{
		{"child sleeps", "sleep 60 & echo $! > child.pid\necho $$ > leader.pid\nwait\n"},
		{"leader ignores SIGTERM", "trap '' TERM\nsleep 60 & echo $! > child.pid\necho $$ > leader.pid\nwhile :; do sleep 1; done\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fakeTools(t)
			src := t.TempDir()
			writeScript(t, filepath.Join(src, "build.sh"), tc.script)
			env, _, _ := testEnv(t)
			s := newStep(t, Spec{Dir: src, Argv: []string{"./build.sh"}})
			s.killGrace = 300 * time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx, env) }()

			var pids []int
			deadline := time.Now().Add(5 * time.Second)
			for len(pids) < 2 && time.Now().Before(deadline) {
				pids = pids[:0]
				for _, f := range []string{"leader.pid", "child.pid"} {
					if b, err := os.ReadFile(filepath.Join(src, f)); err == nil {
						if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
							pids = append(pids, pid)
						}
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(pids) < 2 {
				t.Fatal("build did not start its processes")
			}
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run = %v, want context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("cancel took %v", took)
			}
			for _, pid := range pids {
				deadline := time.Now().Add(2 * time.Second)
				for alive(pid) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if alive(pid) {
					t.Errorf("process %d still running after cancel", pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

func TestRunProgress(t *testing.T) {
	script := `echo "-- Configuring done"
echo "[ 42%] Building CUDA object CMakeFiles/common_ops.dir/csrc/gemm/nvfp4.cu.o"
sleep 0.3
printf '[123/456] Building CUDA object csrc/moe.cu.o\r\n'
echo "ptxas info: 0 bytes"
sleep 0.3
`
	t.Run("terminal", func(t *testing.T) {
		fakeTools(t)
		src := t.TempDir()
		writeScript(t, filepath.Join(src, "build.sh"), script)
		env, out, console := testEnv(t)
		env.IsTerminal = true
		s := newStep(t, Spec{Dir: src, Argv: []string{"./build.sh"}})
		s.statusEvery = 50 * time.Millisecond
		if err := s.Run(context.Background(), env); err != nil {
			t.Fatalf("Run: %v", err)
		}
		c := console.String()
		for _, want := range []string{"\r\x1b[Kkernel: building", "[ 42%] Building CUDA object CMakeFiles/common_op",
			"[123/456] Building CUDA object csrc/moe.cu.o", "4 lines"} {
			if !strings.Contains(c, want) {
				t.Errorf("console lacks %q:\n%q", want, c)
			}
		}
		if !strings.HasSuffix(c, "\r\x1b[K") {
			t.Errorf("status line not cleared at the end: %q", c[max(0, len(c)-40):])
		}
		if strings.Contains(c, "ptxas info") {
			t.Error("raw build output reached the console")
		}
		if !strings.Contains(out.String(), "ptxas info: 0 bytes") {
			t.Error("build output missing from the step log")
		}
	})
	t.Run("pipe", func(t *testing.T) {
		fakeTools(t)
		src := t.TempDir()
		writeScript(t, filepath.Join(src, "build.sh"), script)
		env, _, console := testEnv(t)
		s := newStep(t, Spec{Dir: src, Argv: []string{"./build.sh"}})
		s.logEvery = 100 * time.Millisecond
		if err := s.Run(context.Background(), env); err != nil {
			t.Fatalf("Run: %v", err)
		}
		c := console.String()
		if strings.Contains(c, "\x1b[K") {
			t.Error("terminal escapes written to a pipe")
		}
		n := strings.Count(c, "lines=")
		if n < 2 || n > 8 {
			t.Errorf("%d progress lines in 0.6 s at 100 ms, want a few:\n%s", n, c)
		}
		if !strings.Contains(c, "[123/456] Building CUDA object csrc/moe.cu.o") {
			t.Errorf("no last target in the progress lines:\n%s", c)
		}
	})
}

// Without GPU facts (no NVML, no fixture) and no TORCH_CUDA_ARCH_LIST in the recipe, the
// build does not start: it would build for no arch, or for whatever the process's
// environment says. The error says what to set.
func TestRunWithoutArchListFails(t *testing.T) {
	fakeTools(t)
	src := t.TempDir()
	writeScript(t, filepath.Join(src, "build.sh"), "touch ran\n")
	for _, tc := range []struct {
		name  string
		facts bool
		want  string
	}{
		{"no facts", false, "NVML is not available and no fixture is set"},
		{"no GPU", true, "NVML lists no GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _, _ := testEnv(t)
			env.Facts = nil
			if tc.facts {
				env.Facts = &gpu.Facts{DriverVersion: "580.95.05"}
			}
			s := newStep(t, Spec{Dir: src, Argv: []string{"./build.sh"}})
			err := s.Run(context.Background(), env)
			if exitcode.Of(err) != exitcode.ExitHost || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "set TORCH_CUDA_ARCH_LIST in the step's env") {
				t.Fatalf("Run = %v, want exit 4 naming the fix", err)
			}
			if _, err := os.Stat(filepath.Join(src, "ran")); err == nil {
				t.Error("the build ran")
			}
		})
	}
}
