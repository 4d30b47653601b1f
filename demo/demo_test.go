// Package demo holds `make demo` (run.sh) and its test: the whole flow on a machine
// without a GPU, checked by its exit code and its key lines.
package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/sglprov/sglprov/test/ociregistry"
)

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo builds three binaries; skipped with -short")
	}
	for _, tool := range []string{"git", "make", "cc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the demo needs %s", tool)
		}
	}
	bin := filepath.Join(t.TempDir(), "sglprov")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sglprov")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sglprov: %v\n%s", err, out)
	}
	cmd := exec.Command("bash", "demo/run.sh")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "SGLPROV="+bin, "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		// host fitness: GPU 3's link at x8, refused with its fix, exit 4
		`GPU 3 \(NVIDIA RTX PRO 6000 Blackwell Server Edition\) has its PCIe link at x8; the GPU and its slot can do x16\n    fix: reseat the GPU`,
		// preflight: the H200 host with CUDA 12.4's nvcc, every problem at once, exit 4
		`(?s)host does not meet the recipe's requirements:\n  host has 1 GPU; this recipe needs at least 4\n.*GPU 0 \(NVIDIA H200\) has compute capability 9.0.*\n  driver 570.172.08 does not satisfy >=580\n.*nvcc: 12.4.131 at \S+/cuda-12.4/bin/nvcc does not satisfy >=13.0; install a CUDA toolkit`,
		`sglprov plan exited 4`,
		// plan: every step new, the first SM120 profile with --tp 8
		`sglang-src +source +run +new`,
		`ExecStart: .*--fp4-gemm-backend flashinfer_cudnn .*--tp 8 `,
		// the gate rejects the profile that answers "!!!!" and passes the second
		`prime +chat +FAIL +1 +\S+ +degenerate reasoning_content`,
		`activating profile .*profile=sm120-fp4-cutlass`,
		`smoke gate passed .*profile=sm120-fp4-cutlass`,
		`fact +chat +PASS`,
		// the gate's other kinds pass on the good profile
		`load +load +PASS +64 `,
		`weather +tool +PASS`,
		`thinking +reasoning +PASS`,
		`sweep +accuracy +PASS +60 `,
		// the second apply skips what is done and starts with the winner
		`sglang-src +skipped +- +unchanged`,
		`sm120-patches +skipped +- +unchanged`,
		`sgl-kernel +skipped +- +unchanged`,
		`weights +skipped +- +unchanged`,
		`(?s)second run.*smoke gate step=smoke url=\S+ profile=sm120-fp4-cutlass`,
		`last run: ok`,
		// the gate under load: right on each sequential case, garbage with 64 at once
		`(?s)profile sm120-fp4-gemm-cutlass\n.*arithmetic +chat +PASS.*load +load +FAIL +64 \(\d+ failed\) +p50 \S+ p99 \S+ +\d+ of 64 answers failed; first: degenerate content`,
		`activating profile .*profile=sm120-fp4-gemm-cudnn`,
		`smoke gate passed .*profile=sm120-fp4-gemm-cudnn`,
		// the daemon watches the demo node: one canary, the metrics, a clean stop
		`healthz: ok node_health=healthy`,
		`sglprov_canary_runs_total\{recipe="qwen3.5-397b-a17b-nvfp4-sm120-demo"\} [1-9]`,
		`sglprov_canary_failures_total\{recipe="qwen3.5-397b-a17b-nvfp4-sm120-demo"\} 0`,
		`sglprov_node_health\{recipe="qwen3.5-397b-a17b-nvfp4-sm120-demo",state="healthy"\} 1`,
		`daemon stopped on SIGTERM, exit 0`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// The fleet cache's part, where a registry is installed.
	if _, err := ociregistry.Find(); err == nil {
		for _, want := range []string{
			`(?s)node B: .*sgl-kernel +build +run +new; from cache sha256:`,
			`sgl-kernel +ok \(from cache\) .*artifact sha256:[0-9a-f]{64}`,
			`weights +ok \(from cache\) .*artifact sha256:[0-9a-f]{64}`,
			`saved: \d+ ms here`,
		} {
			if !regexp.MustCompile(want).Match(out) {
				t.Errorf("demo output lacks %q", want)
			}
		}
		// The time saved is that of the longest path: the build and the download run at
		// the same time, so the sum of both would claim more than a node waits.
		k := regexp.MustCompile(`(?m)^  sgl-kernel +(\d+) ms +(\d+) ms$`).FindSubmatch(out)
		w := regexp.MustCompile(`(?m)^  weights +(\d+) ms +(\d+) ms$`).FindSubmatch(out)
		sv := regexp.MustCompile(`saved: (\d+) ms here`).FindSubmatch(out)
		if k == nil || w == nil || sv == nil {
			t.Errorf("the time saved is not shown as a table of both steps and a total")
		} else {
			n := func(b []byte) int { v, _ := strconv.Atoi(string(b)); return v }
			want := max(n(k[1]), n(w[1])) - max(n(k[2]), n(w[2]))
			if got := n(sv[1]); got != want {
				t.Errorf("saved: %d ms, but the longest path went from %d to %d ms (%d ms saved)", got, max(n(k[1]), n(w[1])), max(n(k[2]), n(w[2])), want)
			}
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
}

// TestReadmeRunsTheRecipeByHand: demo/README.md's by-hand commands set every var run.sh
// sets for the demo recipe, and name KEEP=1 and the fakes.
func TestReadmeRunsTheRecipeByHand(t *testing.T) {
	script, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	args := regexp.MustCompile(`(?s)\nARGS=\((.*?)\)\n`).FindSubmatch(script)
	if args == nil {
		t.Fatal("run.sh has no ARGS=(...) for the demo recipe")
	}
	sets := regexp.MustCompile(`--set "(\w+)=`).FindAllSubmatch(args[1], -1)
	if len(sets) == 0 {
		t.Fatal("run.sh's ARGS set no var")
	}
	for _, s := range sets {
		if !regexp.MustCompile(`--set ` + string(s[1]) + `=`).Match(readme) {
			t.Errorf("demo/README.md's by-hand apply does not set %s, which run.sh sets", s[1])
		}
	}
	for _, want := range []string{"KEEP=1", "fake-sglang", "fake-hub", "SGLPROV_GPU_FIXTURE=", "HF_ENDPOINT=", "recipes/demo.yaml"} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).Match(readme) {
			t.Errorf("demo/README.md does not name %s", want)
		}
	}
}
