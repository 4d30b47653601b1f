package build

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/engine"
)

// fpFixture is a source tree, fake toolchain and step spec whose fingerprint a test
// compares before and after one change.
type fpFixture struct {
	root, src, bin string
	spec           Spec
	env            *engine.Env
	host           hostInfo
}

func newFPFixture(t *testing.T, useGit bool) *fpFixture {
	t.Helper()
	f := &fpFixture{bin: fakeTools(t), root: t.TempDir()}
	f.src = filepath.Join(f.root, "sglang", "sgl-kernel")
	fakeNVCC(t, f.bin, "12.9, V12.9.86")
	fakePython(t, f.bin, "3.12.3", "2.9.1+cu129 12.9")
	writeFile(t, filepath.Join(f.src, "CMakeLists.txt"), "project(k LANGUAGES CXX CUDA)\n")
	writeFile(t, filepath.Join(f.src, "csrc", "gemm.cu"), "__global__ void k() {}\n")
	writeFile(t, filepath.Join(f.root, "sglang", "python", "server.py"), "print('serve')\n")
	if useGit {
		repo := filepath.Join(f.root, "sglang")
		writeFile(t, filepath.Join(repo, ".gitignore"), "*.log\n")
		git(t, repo, "init", "-q")
		git(t, repo, "add", ".")
		git(t, repo, "commit", "-q", "-m", "initial")
	}
	f.spec = Spec{Dir: f.src, Argv: []string{"python3", "-m", "build"}, Python: "python3",
		Outputs: []string{"dist/*.whl"}}
	f.env, _, _ = testEnv(t)
	f.host = fixedHost(16, 64*gb)
	return f
}

func (f *fpFixture) fingerprint(t *testing.T) map[string]string {
	t.Helper()
	s := newStep(t, f.spec)
	s.host = f.host
	parts, err := s.Fingerprint(context.Background(), f.env)
	if err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	return parts
}

func TestFingerprintChanges(t *testing.T) {
	tests := []struct {
		name   string
		git    bool
		change func(t *testing.T, f *fpFixture)
		want   []string
	}{
		{"nvcc version", false, func(t *testing.T, f *fpFixture) { fakeNVCC(t, f.bin, "13.0, V13.0.48") },
			[]string{"toolchain.nvcc"}},
		{"nvcc removed", false, func(t *testing.T, f *fpFixture) { os.Remove(filepath.Join(f.bin, "nvcc")) },
			[]string{"toolchain.nvcc"}},
		{"torch version", false, func(t *testing.T, f *fpFixture) { fakePython(t, f.bin, "3.12.3", "2.9.1+cu130 13.0") },
			[]string{"toolchain.torch"}},
		{"python version and torch", false, func(t *testing.T, f *fpFixture) { fakePython(t, f.bin, "3.12.4", "2.9.1+cu130 13.0") },
			[]string{"toolchain.python", "toolchain.torch"}},
		{"env var in the recipe", false, func(t *testing.T, f *fpFixture) { f.spec.Env = map[string]string{"SGL_KERNEL_ENABLE_FA3": "OFF"} },
			[]string{"env"}},
		{"arch list from the GPUs", false, func(t *testing.T, f *fpFixture) { f.env.Facts = facts("9.0", "580.95.05") },
			[]string{"env"}},
		{"argv", false, func(t *testing.T, f *fpFixture) { f.spec.Argv = append(f.spec.Argv, "--wheel") },
			[]string{"argv"}},
		{"file in a plain tree", false, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.src, "csrc", "gemm.cu"), "__global__ void k2() {}\n")
		}, []string{"tree"}},
		{"new file in a plain tree", false, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.src, "csrc", "new.cu"), "\n")
		}, []string{"tree"}},
		{"executable bit in a plain tree", false, func(t *testing.T, f *fpFixture) {
			os.Chmod(filepath.Join(f.src, "CMakeLists.txt"), 0o755)
		}, []string{"tree"}},
		{"patched tracked file in git", true, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.src, "csrc", "gemm.cu"), "__global__ void patched() {}\n")
		}, []string{"tree"}},
		{"untracked file in git (added by a patch)", true, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.src, "csrc", "sm120.cu"), "// new\n")
		}, []string{"tree"}},
		{"untracked file content in git", true, func(t *testing.T, f *fpFixture) {
			// The baseline has the file; the change edits it.
			writeFile(t, filepath.Join(f.src, "csrc", "sm120.cu"), "// v2\n")
		}, []string{"tree"}},
		{"new commit in git", true, func(t *testing.T, f *fpFixture) {
			git(t, filepath.Dir(f.src), "commit", "-q", "--allow-empty", "-m", "next")
		}, []string{"tree"}},
		{"custom probe added", false, func(t *testing.T, f *fpFixture) {
			writeScript(t, filepath.Join(f.bin, "gcc"), "echo 'gcc (Debian 12.2.0-14) 12.2.0'\n")
			f.spec.Probes = [][]string{{"gcc", "--version"}}
		}, []string{"toolchain.gcc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFPFixture(t, tc.git)
			if tc.name == "untracked file content in git" {
				writeFile(t, filepath.Join(f.src, "csrc", "sm120.cu"), "// v1\n")
			}
			before := f.fingerprint(t)
			tc.change(t, f)
			after := f.fingerprint(t)
			if diff := cmp.Diff(tc.want, engine.ChangedParts(before, after)); diff != "" {
				t.Errorf("changed parts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFingerprintNonChanges(t *testing.T) {
	tests := []struct {
		name   string
		git    bool
		change func(t *testing.T, f *fpFixture)
	}{
		{"driver version", false, func(t *testing.T, f *fpFixture) { f.env.Facts = facts("12.0", "590.10.01") }},
		{"driver version (git)", true, func(t *testing.T, f *fpFixture) { f.env.Facts = facts("12.0", "590.10.01") }},
		{"file outside dir", false, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.root, "sglang", "python", "server.py"), "print('changed')\n")
			writeFile(t, filepath.Join(f.root, "unrelated.txt"), "x")
		}},
		{"patched file outside dir in the same git tree", true, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.root, "sglang", "python", "server.py"), "print('patched')\n")
			writeFile(t, filepath.Join(f.root, "sglang", "python", "new.py"), "x")
		}},
		{"free memory (MAX_JOBS)", false, func(t *testing.T, f *fpFixture) { f.host = fixedHost(128, 512*gb) }},
		{"MAX_JOBS and CMAKE_BUILD_PARALLEL_LEVEL in env", false, func(t *testing.T, f *fpFixture) {
			f.spec.Env = map[string]string{"MAX_JOBS": "3", "CMAKE_BUILD_PARALLEL_LEVEL": "3"}
		}},
		{"jobs and per-job memory", false, func(t *testing.T, f *fpFixture) { f.spec.Jobs, f.spec.MemPerJobGiB = 2, 8 }},
		{"ccache installed", false, func(t *testing.T, f *fpFixture) {
			writeScript(t, filepath.Join(f.bin, "ccache"), "exec \"$@\"\n")
		}},
		{"outputs and build dirs in a plain tree", false, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.src, "dist", "sgl_kernel-0.3-cp310-abi3-linux_x86_64.whl"), "wheel")
			writeFile(t, filepath.Join(f.src, "build", "CMakeCache.txt"), "cache")
			writeFile(t, filepath.Join(f.src, "sgl_kernel.egg-info", "PKG-INFO"), "info")
			writeFile(t, filepath.Join(f.src, "python", "__pycache__", "x.pyc"), "pyc")
		}},
		{"outputs and build dirs in git (not ignored)", true, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.src, "dist", "sgl_kernel-0.3-cp310-abi3-linux_x86_64.whl"), "wheel")
			writeFile(t, filepath.Join(f.src, "build", "CMakeCache.txt"), "cache")
		}},
		{"ignored file in git", true, func(t *testing.T, f *fpFixture) {
			writeFile(t, filepath.Join(f.src, "build.log"), "log")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFPFixture(t, tc.git)
			before := f.fingerprint(t)
			tc.change(t, f)
			after := f.fingerprint(t)
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("fingerprint changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestFingerprintValues(t *testing.T) {
	f := newFPFixture(t, true)
	writeScript(t, filepath.Join(f.bin, "failing"), "echo 'boom: no such module' >&2\nexit 4\n")
	writeScript(t, filepath.Join(f.bin, "javac"), "echo 'javac 21.0.2' >&2\n")
	f.spec.Probes = [][]string{{"failing"}, {"missing-tool", "--version"}, {"/opt/cuda-12.8/bin/nvcc", "--version"},
		{"javac", "-version"}}
	f.spec.Env = map[string]string{"MAX_JOBS": "3", "CMAKE_ARGS": "-DENABLE_BELOW_SM90=OFF"}
	parts := f.fingerprint(t)

	want := map[string]string{
		"argv":                   `["python3","-m","build"]`,
		"env":                    "CMAKE_ARGS=-DENABLE_BELOW_SM90=OFF\nSGL_KERNEL_COMPILE_THREADS=1\nTORCH_CUDA_ARCH_LIST=12.0a",
		"toolchain.python":       "Python 3.12.3",
		"toolchain.torch":        "2.9.1+cu129 12.9",
		"toolchain.failing":      "error: exit status 4: boom: no such module",
		"toolchain.missing-tool": "absent",
		"toolchain.javac":        "javac 21.0.2",
		// The custom nvcc probe replaces the default one; that nvcc does not exist here.
		"toolchain.nvcc": "absent",
	}
	tree := parts["tree"]
	delete(parts, "tree")
	if diff := cmp.Diff(want, parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(tree, "git ") || !strings.Contains(tree, " diff ") || !strings.Contains(tree, " untracked ") {
		t.Errorf("tree = %q, want a git digest", tree)
	}
}

func TestFingerprintDirNotYetThere(t *testing.T) {
	fakeTools(t)
	env, _, _ := testEnv(t)
	s := newStep(t, Spec{Dir: filepath.Join(t.TempDir(), "not-cloned-yet"), Argv: []string{"make"}})
	parts, err := s.Fingerprint(context.Background(), env)
	if err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	if parts["tree"] != "absent" || parts["toolchain.nvcc"] != "absent" {
		t.Errorf("tree = %q, nvcc = %q; want both absent", parts["tree"], parts["toolchain.nvcc"])
	}
	if _, ok := parts["toolchain.torch"]; ok {
		t.Error("toolchain.torch probed without a python in the spec")
	}
}

func TestProbeNames(t *testing.T) {
	s := newStep(t, Spec{Dir: "/x", Argv: []string{"make"}, Python: "/venv/bin/python",
		Probes: [][]string{{"gcc", "--version"}, {"gcc", "-dumpmachine"}, {"/usr/local/cuda/bin/nvcc", "--version"}}})
	var got []string
	for _, p := range s.probes() {
		got = append(got, p.name+" "+strings.Join(p.argv, " "))
	}
	want := []string{
		"toolchain.nvcc /usr/local/cuda/bin/nvcc --version",
		"toolchain.python /venv/bin/python --version",
		"toolchain.torch /venv/bin/python -c import torch; print(torch.__version__, torch.version.cuda)",
		"toolchain.gcc gcc --version",
		"toolchain.gcc#2 gcc -dumpmachine",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("probes (-want +got):\n%s", diff)
	}
}

func TestFingerprintInputs(t *testing.T) {
	f := newFPFixture(t, true)
	f.spec.Argv = []string{"python3", "-m", "pip", "install", "--no-index", "--find-links", "dist", "sgl-kernel"}
	f.spec.Inputs = []string{"dist/*.whl"}
	f.spec.Outputs = nil
	whl := filepath.Join(f.src, "dist", "sgl_kernel-0.3-cp310-abi3-linux_x86_64.whl")

	none := f.fingerprint(t)
	if got := none["inputs"]; got != "dist/*.whl none" {
		t.Errorf("inputs before the wheel exists = %q", got)
	}
	writeFile(t, whl, "wheel v1")
	built := f.fingerprint(t)
	if diff := cmp.Diff([]string{"inputs"}, engine.ChangedParts(none, built)); diff != "" {
		t.Errorf("wheel appeared: changed parts (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(built["inputs"], whl+" ") {
		t.Errorf("inputs = %q, want the wheel's path and digest", built["inputs"])
	}
	if again := f.fingerprint(t); !cmp.Equal(built, again) {
		t.Error("fingerprint not stable while the wheel is unchanged")
	}
	writeFile(t, whl, "wheel v2")
	rebuilt := f.fingerprint(t)
	if diff := cmp.Diff([]string{"inputs"}, engine.ChangedParts(built, rebuilt)); diff != "" {
		t.Errorf("wheel rebuilt: changed parts (-want +got):\n%s", diff)
	}
}
