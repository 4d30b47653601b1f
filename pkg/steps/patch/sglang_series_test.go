package patch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const sglangSeriesDir = "../../../patches/sglang/cf4465f3a8be"

// newFileOf returns the content a patch gives a file it creates.
func newFileOf(t *testing.T, patchFile, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sglangSeriesDir, patchFile))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	in := false
	for _, line := range strings.SplitAfter(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "+++ "):
			in = strings.TrimSpace(line) == "+++ b/"+path
		case strings.HasPrefix(line, "diff --git "):
			in = false
		case in && strings.HasPrefix(line, "+"):
			out.WriteString(line[1:])
		}
	}
	if out.Len() == 0 {
		t.Fatalf("%s creates no %s", patchFile, path)
	}
	return out.String()
}

// The miniature of sgl-kernel (testdata/build/sgl-kernel-mini), built on a real GPU by
// test/gpu/verify.sh, uses the very module the series adds to sgl-kernel.
func TestHostArchModuleIsTheMiniatures(t *testing.T) {
	got := newFileOf(t, "0004-sgl-kernel-host-arch-only.patch", "sgl-kernel/cmake/host_arch.cmake")
	want, err := os.ReadFile("../../../testdata/build/sgl-kernel-mini/cmake/host_arch.cmake")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Error("patch 0004's host_arch.cmake differs from testdata/build/sgl-kernel-mini/cmake/host_arch.cmake; regenerate the patch")
	}
}

// The host-arch filter, run by CMake on sgl-kernel's -gencode list: an SM120 host keeps
// sm_120a alone and no FA3, a Hopper host sm_90a and FA3; without TORCH_CUDA_ARCH_LIST
// nothing changes (upstream compiles five targets at CUDA 13.0); an arch list that
// leaves nothing is an error naming it.
func TestHostArchGencodeCounts(t *testing.T) {
	cmake, err := exec.LookPath("cmake")
	if err != nil {
		t.Skip("cmake not installed (make deps installs it)")
	}
	script, _ := filepath.Abs("../../../testdata/build/sgl-kernel-mini/cmake/count.cmake")
	tests := []struct {
		name, archList string
		defines        []string
		want           string
	}{
		{"SM120, the recipe's switches", "12.0a",
			[]string{"-DENABLE_BELOW_SM90=OFF", "-DSGL_KERNEL_ENABLE_FA3=OFF"},
			"before=5 after=1 fa3=OFF targets=sm_120a"},
		{"SM120, upstream's default ENABLE_BELOW_SM90=ON", "12.0a", nil,
			"before=7 after=1 fa3=OFF targets=sm_120a"},
		{"Hopper, the Hopper switches", "9.0a",
			[]string{"-DENABLE_BELOW_SM90=OFF", "-DSGL_KERNEL_ENABLE_FA3=ON"},
			"before=5 after=1 fa3=ON targets=sm_90a"},
		{"Hopper with FA3 switched off", "9.0a",
			[]string{"-DENABLE_BELOW_SM90=OFF", "-DSGL_KERNEL_ENABLE_FA3=OFF"},
			"before=5 after=1 fa3=OFF targets=sm_90a"},
		{"mixed Ada and Hopper", "8.9;9.0a", nil,
			"before=7 after=2 fa3=OFF targets=sm_89,sm_90a"},
		{"no arch list: upstream's targets", "",
			[]string{"-DENABLE_BELOW_SM90=OFF"},
			"before=5 after=5 fa3=forced ON (upstream) targets=sm_90,sm_100a,sm_120a,sm_103a,sm_90a"},
		{"nothing left", "8.0",
			[]string{"-DENABLE_BELOW_SM90=OFF"},
			`TORCH_CUDA_ARCH_LIST="8.0" (sm_80) leaves none of the 5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"-DCUDA_VERSION=13.0"}, tt.defines...)
			cmd := exec.Command(cmake, append(args, "-P", script)...)
			cmd.Env = append(os.Environ(), "TORCH_CUDA_ARCH_LIST="+tt.archList)
			out, _ := cmd.CombinedOutput()
			if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), tt.want) {
				t.Errorf("cmake -P count.cmake with TORCH_CUDA_ARCH_LIST=%q:\n%s\nwant %q", tt.archList, out, tt.want)
			}
		})
	}
}

// The check of the opt-in all-reduce fusion profile (patch 0005), against stand-ins for
// torch and flashinfer: it passes only with peer access between every pair of GPUs, a
// FlashInfer whose TensorRT-LLM all-reduce lists SM12x, and a verified version given.
func TestSM12xAllReduceFusionCheck(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	script := filepath.Join(t.TempDir(), "check.py")
	if err := os.WriteFile(script, []byte(newFileOf(t, "0005-sm12x-allreduce-fusion-check.patch",
		"scripts/sglprov/check_sm12x_allreduce_fusion.py")), 0o644); err != nil {
		t.Fatal(err)
	}
	// stubs writes a torch with n GPUs (noPeer: the pair without access) and a flashinfer.
	stubs := func(t *testing.T, n int, noPeer string, version, majors string) string {
		dir := t.TempDir()
		write := func(name, text string) {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("torch/__init__.py", "from . import cuda\n")
		write("torch/cuda.py", "def device_count():\n    return "+strconv.Itoa(n)+"\n"+
			"def can_device_access_peer(i, j):\n    return f'{i},{j}' != '"+noPeer+"'\n")
		write("flashinfer/__init__.py", "__version__ = '"+version+"'\n")
		write("flashinfer/jit/__init__.py", "")
		write("flashinfer/jit/comm.py", "def gen_trtllm_comm_module():\n"+
			"    return get_nvcc_flags_list(supported_major_versions=["+majors+"])\n")
		return dir
	}
	tests := []struct {
		name          string
		n             int
		noPeer        string
		version       string
		majors        string
		minVersion    string
		wantOK        bool
		wantLastError string
	}{
		{"all good", 4, "", "0.6.17", "9, 10, 12", "0.6.17", true, ""},
		{"one GPU", 1, "", "0.6.17", "9, 10, 12", "0.6.17", false, "1 GPU visible; a fused all-reduce needs at least 2"},
		{"no peer path", 8, "2,5", "0.6.17", "9, 10, 12", "0.6.17", false, "GPU 2 cannot access GPU 5 as a peer"},
		{"FlashInfer of early 2026", 4, "", "0.6.3", "9, 10", "0.6.17", false, "supports compute capability majors [9, 10], not 12"},
		{"widened gate, no verified version", 4, "", "0.6.3", "9, 10, 12", "", false, "no FlashInfer version with the SM12x all-reduce (flashinfer#3903)"},
		{"older than the verified version", 4, "", "0.6.15", "9, 10, 12", "0.6.17", false, "flashinfer 0.6.15 is older than 0.6.17"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(python, script, tt.minVersion)
			cmd.Env = append(os.Environ(), "PYTHONPATH="+stubs(t, tt.n, tt.noPeer, tt.version, tt.majors))
			out, err := cmd.CombinedOutput()
			if tt.wantOK {
				if err != nil || strings.TrimSpace(string(out)) != "ok" {
					t.Fatalf("check refused: %v\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("check passed, want a refusal:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, tt.wantLastError) {
				t.Errorf("last line %q, want it to contain %q", last, tt.wantLastError)
			}
		})
	}
}
