package build

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// copyTree copies the regular files of src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == "build" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		return os.WriteFile(filepath.Join(dst, rel), b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCMakeHello builds testdata/build/cmake-hello with the real cmake and C compiler: the
// program runs, the outputs are intact, and the fingerprint after the build equals the one
// before (the engine records the one after, so a second apply skips).
func TestCMakeHello(t *testing.T) {
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("cmake not installed")
	}
	src := filepath.Join(t.TempDir(), "cmake-hello")
	copyTree(t, filepath.Join("..", "..", "..", "testdata", "build", "cmake-hello"), src)
	out := &lockedBuffer{}
	env := engine.NewTestEnv(t.TempDir(), out)
	env.Facts = facts("12.0", "580.95.05")
	s, err := New("hello", &Spec{Dir: src, Argv: []string{"cmake", "-P", "build.cmake"}, Outputs: []string{"build/hello"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before, err := s.Fingerprint(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, env); err != nil {
		t.Fatalf("Run: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "Built target hello") {
		t.Errorf("build log lacks cmake's output:\n%s", out)
	}
	got, err := exec.Command(filepath.Join(src, "build", "hello")).Output()
	if err != nil || string(got) != "hello from cmake-hello\n" {
		t.Errorf("hello printed %q, %v", got, err)
	}
	after, err := s.Fingerprint(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the build changed its own fingerprint (-before +after):\n%s", diff)
	}
	if ok, reason, err := s.Intact(ctx, env); !ok || err != nil {
		t.Errorf("Intact = %t, %q, %v", ok, reason, err)
	}
}

// TestCUDABuildOnGPU builds testdata/build/cuda-cc through the step for the compute
// capability of this host's GPU 0 and checks that the program reports it and that the
// binary holds code for the arch-specific target (sm_90a on an H200). It runs only where
// nvcc, nvidia-smi and cuobjdump are on PATH.
func TestCUDABuildOnGPU(t *testing.T) {
	for _, tool := range []string{"nvcc", "nvidia-smi", "cuobjdump", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH", tool)
		}
	}
	smi, err := exec.Command("nvidia-smi", "--query-gpu=compute_cap,driver_version", "--format=csv,noheader", "--id=0").Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	fields := strings.Split(strings.TrimSpace(string(smi)), ",")
	cc, driver := strings.TrimSpace(fields[0]), strings.TrimSpace(fields[len(fields)-1])
	f := &gpu.Facts{DriverVersion: driver, GPUs: []gpu.Device{{Index: 0, ComputeCapability: cc}}}

	src := filepath.Join(t.TempDir(), "cuda-cc")
	copyTree(t, filepath.Join("..", "..", "..", "testdata", "build", "cuda-cc"), src)
	out := &lockedBuffer{}
	env := engine.NewTestEnv(t.TempDir(), out)
	env.Facts = f
	s, err := New("cuda-cc", &Spec{Dir: src, Argv: []string{"make"}, Outputs: []string{"build/cc"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	parts, err := s.Fingerprint(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fingerprint parts: %q", parts)
	if err := s.Run(ctx, env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("build log:\n%s", out)

	bin := filepath.Join(src, "build", "cc")
	var stderr strings.Builder
	cmd := exec.Command(bin)
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	t.Logf("cc printed: %s%s", got, stderr.String())
	if first, _, _ := strings.Cut(string(got), "\n"); first != cc {
		t.Errorf("cc printed %q first, want %q", first, cc)
	}
	elf, err := exec.Command("cuobjdump", "--list-elf", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("cuobjdump: %v\n%s", err, elf)
	}
	t.Logf("cuobjdump --list-elf:\n%s", elf)
	want := "sm_" + strings.ReplaceAll(gpu.ArchName(cc), ".", "")
	if !strings.Contains(string(elf), want+".cubin") {
		t.Errorf("cuobjdump --list-elf shows no %s", want)
	}
	after, err := s.Fingerprint(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(parts, after); diff != "" {
		t.Errorf("the build changed its own fingerprint (-before +after):\n%s", diff)
	}
	if ok, reason, err := s.Intact(ctx, env); !ok || err != nil {
		t.Errorf("Intact = %t, %q, %v", ok, reason, err)
	}
	t.Logf("jobs on this host: %d cores", runtime.NumCPU())
}
