// Package nodeb_test benchmarks a whole node's apply with the fleet cache against the same
// apply without it: node B's build outputs, weights and Python environment from the
// registry, against node A's build, hub download and pip resolution.
package nodeb_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cli"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/test/fakehub"
	"github.com/sglprov/sglprov/test/ociregistry"
	"github.com/sglprov/sglprov/test/pyindex"
)

// envInt is the environment variable name as a positive int, else def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkNodeBApplyVsNodeA: the time to a serving node apart from the model's load, on
// a node of a fleet with its cache (node B) against a node without one (node A), each
// from an empty node folder and state dir, one `sglprov apply` (in process) of one recipe:
//
//   - venv: python3 -m venv (both nodes run it; the cache has nothing for it);
//   - kernel: a build step, make -j of a generated C project of SGLPROV_BENCH_BUILD_UNITS
//     (default 2) files of chained 64-bit arithmetic at -O2, standing in for sgl-kernel;
//   - python: pip install of "top" and its SGLPROV_BENCH_WHEELS (30) dependencies of
//     SGLPROV_BENCH_WHEEL_KB (512) KiB, from a local PEP 503 index (test/pyindex);
//   - weights: a download step of a generated safetensors model of 4 shards of
//     SGLPROV_BENCH_SHARD_MB (64) MiB from the fake hub (test/fakehub, files above 1 MiB
//     redirected to its CDN), at a pinned commit; SGLPROV_BENCH_HUB_MBPS, when set, bounds
//     each of the hub's file answers to that many MB/s, as a real hub throttles a
//     connection (default: unbounded, loopback).
//
// Node A resolves, builds and downloads. Node B has `cache:` on the real registry
// (Debian's docker-registry on loopback) that a first node with push: true seeded once
// before the timing (its apply, pushes included, is reported as seed-s): node B's
// kernel, python and weights steps must all be "from cache" (checked in its report), and
// the hub must see no request from it. The service start and the smoke gate, and so the
// model's load, are not in the recipe: they cost the same on both nodes. Reported: each
// node's apply seconds, A/B, and each step's seconds on each node from the reports.
func BenchmarkNodeBApplyVsNodeA(b *testing.B) {
	py := pyindex.NeedPip(b)
	if _, err := exec.LookPath("make"); err != nil {
		b.Skip("make is not installed")
	}
	if _, err := exec.LookPath("cc"); err != nil {
		b.Skip("cc is not installed")
	}
	reg := ociregistry.StartT(b)
	work := b.TempDir()

	// The package index: top needs every dep.
	ix := pyindex.Start(b)
	nWheels, kb := envInt("SGLPROV_BENCH_WHEELS", 30), envInt("SGLPROV_BENCH_WHEEL_KB", 512)
	var deps []string
	for i := range nWheels {
		name := fmt.Sprintf("dep%02d", i)
		payload := make([]byte, kb<<9) // hex doubles it
		if _, err := rand.Read(payload); err != nil {
			b.Fatal(err)
		}
		f, w := pyindex.BuildWheel(b, name, "1.0", hex.EncodeToString(payload))
		ix.Publish(name, f, w)
		deps = append(deps, name)
	}
	f, w := pyindex.BuildWheel(b, "top", "1.0", "t", deps...)
	ix.Publish("top", f, w)

	// The hub.
	model := filepath.Join(work, "model")
	if err := fakehub.GenerateModel(model, 4, int64(envInt("SGLPROV_BENCH_SHARD_MB", 64))<<20); err != nil {
		b.Fatal(err)
	}
	hub, err := fakehub.New(fakehub.Options{Repo: "org/bench", FS: os.DirFS(model), Rate: int64(envInt("SGLPROV_BENCH_HUB_MBPS", 0)) * 1e6})
	if err != nil {
		b.Fatal(err)
	}
	hub.Start()
	b.Cleanup(hub.Close)

	// The build's sources, copied into each node's folder.
	src := filepath.Join(work, "src")
	writeProject(b, src, envInt("SGLPROV_BENCH_BUILD_UNITS", 2))

	nd := filepath.Join(work, "node")
	venv := filepath.Join(nd, "venv")
	recipe := filepath.Join(work, "r.yaml")
	text := fmt.Sprintf(benchRecipe, py, venv, filepath.Join(nd, "src"), venv, ix.URL(), filepath.Join(nd, "models", "bench"), hub.URL(), fakehub.DefaultCommit)
	if err := os.WriteFile(recipe, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	cacheFlags := []string{"--set", "cache_oci=" + reg.Addr + "/bench/node"}

	// A fresh node: the node folder (sources, venv, models) emptied and the sources copied
	// in, and a state dir of its own. The nodes take turns at the same paths, so that the
	// steps' fingerprints (which name them) are the same on every node, as on a fleet's
	// identical hosts; the state dir is no part of a fingerprint. (--root would do the same
	// for the build and the download, but it leaves command steps, pip among them, unrun.)
	nodeDir := filepath.Join(work, "node")
	node := func(name string) (state string) {
		if err := os.RemoveAll(nodeDir); err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", src, filepath.Join(nodeDir, "src")).CombinedOutput(); err != nil {
			b.Fatalf("copying the sources: %v: %s", err, out)
		}
		state = filepath.Join(work, "state", name)
		if err := os.RemoveAll(state); err != nil {
			b.Fatal(err)
		}
		return state
	}

	// The first node of the fleet: builds, downloads, resolves and publishes all three.
	seed := apply(b, recipe, node("seed"), append(cacheFlags, "--set", "push=true")...)
	for _, s := range []string{"kernel", "python", "weights"} {
		if st := seed.step(b, s); st.Pushed == "" {
			b.Fatalf("the seeding node did not push %s: %s %s", s, st.Result, st.Reason)
		}
	}

	var tA, tB time.Duration
	stepsA, stepsB := map[string]time.Duration{}, map[string]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		stateA := node(fmt.Sprintf("a%d", i))
		b.StartTimer()
		a := apply(b, recipe, stateA)
		b.StopTimer()
		modelsA := filepath.Join(work, "models-a")
		if err := os.RemoveAll(modelsA); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(filepath.Join(nodeDir, "models"), modelsA); err != nil {
			b.Fatal(err)
		}
		stateB := node(fmt.Sprintf("b%d", i))
		hubBefore, cdnBefore := hub.Connections()
		b.StartTimer()
		nb := apply(b, recipe, stateB, cacheFlags...)
		b.StopTimer()
		if hubAfter, cdnAfter := hub.Connections(); hubAfter != hubBefore || cdnAfter != cdnBefore {
			b.Fatalf("node B asked the hub (%d connections) or its CDN (%d)", hubAfter-hubBefore, cdnAfter-cdnBefore)
		}
		for _, s := range []string{"kernel", "python", "weights"} {
			if st := nb.step(b, s); st.FromCache == "" {
				b.Fatalf("node B's %s did not come from the cache: %s %s", s, st.Result, st.Reason)
			}
			if st := a.step(b, s); st.FromCache != "" {
				b.Fatalf("node A's %s came from a cache", s)
			}
		}
		if err := sameFiles(modelsA, filepath.Join(nodeDir, "models")); err != nil {
			b.Fatal(err)
		}
		tA += a.Duration
		tB += nb.Duration
		for _, st := range a.Steps {
			stepsA[st.Name] += st.Duration
		}
		for _, st := range nb.Steps {
			stepsB[st.Name] += st.Duration
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(seed.Duration.Seconds(), "seed-s")
	b.ReportMetric(tA.Seconds()/n, "nodeA-s")
	b.ReportMetric(tB.Seconds()/n, "nodeB-s")
	b.ReportMetric(tA.Seconds()/tB.Seconds(), "A/B")
	for _, s := range []string{"venv", "kernel", "python", "weights"} {
		b.ReportMetric(stepsA[s].Seconds()/n, "A-"+s+"-s")
		b.ReportMetric(stepsB[s].Seconds()/n, "B-"+s+"-s")
	}
}

// benchRecipe: python3, the venv, the sources, the venv, the index's URL, the models'
// folder, the hub's URL, the commit.
const benchRecipe = `apiVersion: sglprov/v1
name: bench-node
vars:
  cache_oci: ""
  push: "false"
cache:
  oci: "{{ .vars.cache_oci }}"
  push: "{{ .vars.push }}"
steps:
  - name: venv
    command:
      argv: [%q, -m, venv, %q]
  - name: kernel
    build:
      dir: %q
      argv: [sh, -c, 'make -j"$MAX_JOBS"']
      env: {TORCH_CUDA_ARCH_LIST: "none"}
      outputs: ["out/prog"]
      exclude: ["obj"]
  - name: python
    needs: [venv]
    command:
      argv: ["%s/bin/python", -m, pip, install, --index-url, %q, top]
      env: {PIP_NO_CACHE_DIR: "1", PIP_CONFIG_FILE: /dev/null, PIP_DISABLE_PIP_VERSION_CHECK: "1"}
  - name: weights
    download:
      dest: %q
      hf:
        repo: org/bench
        endpoint: %q
        revision: %q
        include: ["*.safetensors", "*.json"]
`

// run is one apply's report.
type run struct{ *engine.Report }

func (r run) step(b *testing.B, name string) *engine.StepReport {
	b.Helper()
	for _, s := range r.Steps {
		if s.Name == name {
			return s
		}
	}
	b.Fatalf("no step %s in the report", name)
	return nil
}

// apply runs `sglprov apply -f recipe --state-dir state FLAGS` in process and returns
// its report.
func apply(b *testing.B, recipe, state string, flags ...string) run {
	b.Helper()
	args := append([]string{"sglprov", "apply", "-f", recipe, "--state-dir", state}, flags...)
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, cli.IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	if code != 0 {
		b.Fatalf("apply (%s): exit %d\n%s\n%s", filepath.Base(state), code, stdout.String(), stderr.String())
	}
	reports, _ := filepath.Glob(filepath.Join(state, "runs", "*", "report.json"))
	if len(reports) != 1 {
		b.Fatalf("apply (%s): %d reports, want 1", filepath.Base(state), len(reports))
	}
	data, err := os.ReadFile(reports[0])
	if err != nil {
		b.Fatal(err)
	}
	var rep engine.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		b.Fatal(err)
	}
	return run{&rep}
}

// sameFiles compares every file under a with the same path under b.
func sameFiles(a, b string) error {
	return filepath.WalkDir(a, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		x, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			return fmt.Errorf("node B lacks %s: %w", rel, err)
		}
		if !bytes.Equal(x, y) {
			return fmt.Errorf("node B's %s differs from node A's", rel)
		}
		return nil
	})
}

// writeProject writes a C project of units files, each of 40 functions of chained 64-bit
// arithmetic, and a Makefile that compiles them at -O2 into out/prog.
func writeProject(b *testing.B, dir string, units int) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for n := 1; n <= units; n++ {
		var s strings.Builder
		s.WriteString("#include <stdint.h>\n")
		for k := range 40 {
			fmt.Fprintf(&s, "uint64_t u%d_f%d(uint64_t x) {\n", n, k)
			for j := range 60 {
				fmt.Fprintf(&s, "  x = (x * %dULL + %dULL) ^ (x >> %d);\n", uint64(6364136223846793005)+uint64(j+k), uint64(1442695040888963407)^uint64(j), j%31+1)
				if k > 0 && j%20 == 0 {
					fmt.Fprintf(&s, "  if (x %% %d == %d) x += u%d_f%d(x >> 60);\n", j+3, j%2, n, k-1)
				}
			}
			s.WriteString("  return x;\n}\n")
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("u%d.c", n)), []byte(s.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	files := map[string]string{
		"main.c": "int main(void) { return 0; }\n",
		"Makefile": "SRCS := $(wildcard u*.c)\nOBJS := $(SRCS:%.c=obj/%.o)\n" +
			"out/prog: $(OBJS) main.c\n\tmkdir -p out && $(CC) -O2 -o $@ main.c $(OBJS)\n" +
			"obj/%.o: %.c\n\tmkdir -p obj && $(CC) -O2 -c -o $@ $<\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
