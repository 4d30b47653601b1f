package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// realNVCC writes an nvcc that prints the real output of CUDA 12.8's nvcc --version with the
// release changed to version (e.g. "12.4, V12.4.131").
func realNVCC(t *testing.T, bin, version string) {
	t.Helper()
	out, err := os.ReadFile("../../hostcmd/testdata/nvcc-12.8.93.txt")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(out), "12.8, V12.8.93", version, 1)
	writeScript(t, filepath.Join(bin, "nvcc"), "cat <<'EOF'\n"+text+"EOF\n")
}

// TestToolchainCheck runs a build whose spec names a python: it is refused before the
// command runs when torch is missing or built for another CUDA major version than nvcc's,
// with both versions and the ways out; it runs when they agree or there is no nvcc.
func TestToolchainCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nvcc  string // "" for none on PATH
		torch string // the python's answer to the torch probe; "missing" fails the import
		want  []string
	}{
		{"torch 13 with nvcc 12", "12.4, V12.4.131", "2.9.1+cu130 13.0", []string{
			"torch 2.9.1+cu130 in ", "is built for CUDA 13.0, but nvcc at ", "is CUDA 12.4.131",
			"install torch built for CUDA 12 (", "-m pip install torch --index-url https://download.pytorch.org/whl/cu124)",
			"install the CUDA 13.0 toolkit torch was built for (apt-get install cuda-toolkit-13-0, then put /usr/local/cuda-13.0/bin first on the PATH)"}},
		{"torch 12 with nvcc 13", "13.0, V13.0.88", "2.8.0+cu128 12.8", []string{"is built for CUDA 12.8, but nvcc at ", "is CUDA 13.0.88", "cuda-toolkit-12-8"}},
		{"cpu torch", "12.8, V12.8.93", "2.9.1+cpu None", []string{"torch 2.9.1+cpu in ", "is built without CUDA", "whl/cu128"}},
		{"torch missing", "12.8, V12.8.93", "missing", []string{"cannot import torch", "No module named 'torch'", "install torch built for CUDA 12, the nvcc at "}},
		{"agree", "12.8, V12.8.93", "2.8.0+cu128 12.8", nil},
		{"agree across minors", "12.9, V12.9.86", "2.8.0+cu128 12.8", nil},
		{"no nvcc", "", "missing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := fakeTools(t)
			src := t.TempDir()
			if tc.nvcc != "" {
				realNVCC(t, bin, tc.nvcc)
			}
			torch := `echo "` + tc.torch + `"`
			if tc.torch == "missing" {
				torch = `echo "Traceback (most recent call last):" >&2; echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 1`
			}
			py := filepath.Join(bin, "python3")
			writeScript(t, py, `case "$1" in
--version) echo "Python 3.12.3" ;;
-c) `+torch+` ;;
esac
`)
			marker := filepath.Join(src, "compiled")
			s := newStep(t, Spec{Dir: src, Argv: []string{"sh", "-c", "touch " + marker}, Python: py})
			env, _, _ := testEnv(t)
			ctx := context.Background()
			if _, err := s.Fingerprint(ctx, env); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := s.Run(ctx, env)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if _, err := os.Stat(marker); err != nil {
					t.Error("the build did not run")
				}
				return
			}
			var te *ToolchainError
			if !errors.As(err, &te) {
				t.Fatalf("Run: %v, want a *ToolchainError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("missing %q in:\n%v", w, err)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the build ran despite the refusal")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("refused in %s", took)
			}
		})
	}
}

// TestToolchainCheckReusesTheFingerprintProbes: the torch import the fingerprint just did
// is not done again before the build.
func TestToolchainCheckReusesTheFingerprintProbes(t *testing.T) {
	bin := fakeTools(t)
	realNVCC(t, bin, "12.8, V12.8.93")
	count := filepath.Join(t.TempDir(), "imports")
	py := filepath.Join(bin, "python3")
	writeScript(t, py, `case "$1" in
--version) echo "Python 3.12.3" ;;
-c) echo x >> `+count+`; echo "2.8.0+cu128 12.8" ;;
esac
`)
	s := newStep(t, Spec{Dir: t.TempDir(), Argv: []string{"true"}, Python: py})
	env, _, _ := testEnv(t)
	if _, err := s.Fingerprint(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(count)
	if n := strings.Count(string(b), "x"); n != 1 {
		t.Errorf("torch imported %d times, want 1", n)
	}
}

// TestToolchainCheckFindsNVCCUnderCUDAHome: nvcc off the build's PATH, under the
// CUDA_HOME the build sets, as torch's extension builder finds it, is checked too.
func TestToolchainCheckFindsNVCCUnderCUDAHome(t *testing.T) {
	bin := fakeTools(t)
	home := t.TempDir()
	realNVCC(t, filepath.Join(home, "bin"), "12.4, V12.4.131")
	py := filepath.Join(bin, "python3")
	writeScript(t, py, `case "$1" in
--version) echo "Python 3.12.3" ;;
-c) echo "2.9.1+cu130 13.0" ;;
esac
`)
	s := newStep(t, Spec{Dir: t.TempDir(), Argv: []string{"true"}, Python: py, Env: map[string]string{"CUDA_HOME": home}})
	env, _, _ := testEnv(t)
	err := s.Run(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "nvcc at "+filepath.Join(home, "bin", "nvcc")+" is CUDA 12.4.131") {
		t.Fatalf("Run: %v", err)
	}
}

// TestFingerprintReadsNVCCOffThePath: the nvcc the toolchain check and the build find
// under CUDA_HOME, off the build's PATH (NVIDIA's packages put it in /usr/local/cuda/bin),
// is the one the fingerprint reads, so that a toolkit upgrade there rebuilds; and the
// check reuses that probe.
func TestFingerprintReadsNVCCOffThePath(t *testing.T) {
	fakeTools(t)
	home := t.TempDir()
	realNVCC(t, filepath.Join(home, "bin"), "13.0, V13.0.88")
	s := newStep(t, Spec{Dir: t.TempDir(), Argv: []string{"true"}, Env: map[string]string{"CUDA_HOME": home}})
	env, _, _ := testEnv(t)
	parts, err := s.Fingerprint(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(parts["toolchain.nvcc"], "release 13.0, V13.0.88") {
		t.Fatalf("toolchain.nvcc = %q", parts["toolchain.nvcc"])
	}
	realNVCC(t, filepath.Join(home, "bin"), "13.1, V13.1.80")
	again, err := s.Fingerprint(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if again["toolchain.nvcc"] == parts["toolchain.nvcc"] {
		t.Errorf("a toolkit upgrade under CUDA_HOME left toolchain.nvcc as it was: %q", again["toolchain.nvcc"])
	}
}

// TestProbeOfAHangingNVCCIsBounded: an nvcc whose --version never ends, and leaves a child
// holding its output, is given up at the probe's limit (recorded as an error), not waited
// for as long as the child lives.
func TestProbeOfAHangingNVCCIsBounded(t *testing.T) {
	bin := fakeTools(t)
	writeScript(t, filepath.Join(bin, "nvcc"), "/bin/sleep 30 &\nexec /bin/sleep 30\n")
	s := newStep(t, Spec{Dir: t.TempDir(), Argv: []string{"true"}})
	s.probeTimeout = 200 * time.Millisecond
	env, _, _ := testEnv(t)
	start := time.Now()
	parts, err := s.Fingerprint(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Fingerprint took %s with a 200ms probe limit", took)
	}
	if !strings.HasPrefix(parts["toolchain.nvcc"], "error: ") {
		t.Errorf("toolchain.nvcc = %q", parts["toolchain.nvcc"])
	}
}
