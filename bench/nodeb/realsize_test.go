package nodeb_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/kcache"
	"github.com/sglprov/sglprov/test/fakehub"
	"github.com/sglprov/sglprov/test/ociregistry"
	"github.com/sglprov/sglprov/test/pyindex"
)

// realRecipe: python3, the venv, the sources, the venv, the index, the models, the hub,
// the commit.
const realRecipe = `apiVersion: sglprov/v1
name: bench-real
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

// BenchmarkNodeBRealSizes: node 2..N at real sizes, each node from an empty node folder
// and state dir (run it with -benchtime=1x: one of each row):
//
//   - a Python environment of SGLPROV_BENCH_ENV_MB (2048) MiB in SGLPROV_BENCH_ENV_FILES
//     (20000) files: "top" and SGLPROV_BENCH_ENV_WHEELS (40) wheels, half of whose files
//     are modules of 4 KiB (pip byte-compiles each) and half incompressible data files
//     (stored, not deflated), from a local package index (test/pyindex);
//   - weights: 4 shards of SGLPROV_BENCH_REAL_SHARD_MB (768) MiB from the fake hub;
//   - a kernel cache of SGLPROV_BENCH_KERNEL_MB (200) MiB laid out as Triton's (a folder
//     per kernel: a cubin and its metadata), pushed as the gate's kernel artifact;
//   - the kernel build: make -j of the C project of BenchmarkNodeBApplyVsNodeA
//     (SGLPROV_BENCH_BUILD_UNITS, 2), standing in for sgl-kernel's build.
//
// Rows: node A (venv, the kernel build, pip against the index, weights from the hub; the
// kernels its server compiles at first start on a GPU are not counted: the device run of
// bench/kernels/triton_kernels.py measures those); node B with the environment artifact and
// the kernel caches (its apply, then the kernel caches' pull, which on a real node comes
// before the server's first start); node B with the lock install (the environment
// artifact and the venv record taken out of the registry: venv, then pip installing the
// registry's wheels); and the limit: the same bytes as node B's pulls (the environment's
// layers, the weights, the kernel caches, the build's outputs) pulled from the registry
// alone, all at once,
// into files. Reported: each row's seconds, A/B and B/limit.
func BenchmarkNodeBRealSizes(b *testing.B) {
	py := pyindex.NeedPip(b)
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s is not installed", tool)
		}
	}
	reg := ociregistry.StartT(b)
	work := b.TempDir()
	// The kernel build's sources (as BenchmarkNodeBApplyVsNodeA's: node A compiles them,
	// standing in for sgl-kernel's build), copied into each node's folder.
	src := filepath.Join(work, "src")
	writeProject(b, src, envInt("SGLPROV_BENCH_BUILD_UNITS", 2))
	ctx := context.Background()
	envMB, envFiles, nWheels := envInt("SGLPROV_BENCH_ENV_MB", 2048), envInt("SGLPROV_BENCH_ENV_FILES", 20000), envInt("SGLPROV_BENCH_ENV_WHEELS", 40)

	ix := pyindex.Start(b)
	var deps []string
	perWheel := int64(envMB) << 20 / int64(nWheels)
	for i := range nWheels {
		name := fmt.Sprintf("big%02d", i)
		f, w := bigWheel(b, name, envFiles/nWheels, perWheel, uint64(i))
		ix.Publish(name, f, w)
		deps = append(deps, name)
	}
	f, w := pyindex.BuildWheel(b, "top", "1.0", "t", deps...)
	ix.Publish("top", f, w)

	model := filepath.Join(work, "model")
	if err := fakehub.GenerateModel(model, 4, int64(envInt("SGLPROV_BENCH_REAL_SHARD_MB", 768))<<20); err != nil {
		b.Fatal(err)
	}
	hub, err := fakehub.New(fakehub.Options{Repo: "org/bench", FS: os.DirFS(model)})
	if err != nil {
		b.Fatal(err)
	}
	hub.Start()
	b.Cleanup(hub.Close)

	nodeDir := filepath.Join(work, "node")
	venv := filepath.Join(nodeDir, "venv")
	recipe := filepath.Join(work, "r.yaml")
	text := fmt.Sprintf(realRecipe, py, venv, filepath.Join(nodeDir, "src"), venv, ix.URL(), filepath.Join(nodeDir, "models", "bench"), hub.URL(), fakehub.DefaultCommit)
	if err := os.WriteFile(recipe, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	repo := reg.Addr + "/bench/real"
	cacheFlags := []string{"--set", "cache_oci=" + repo}
	node := func(name string) string {
		if err := os.RemoveAll(nodeDir); err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", src, filepath.Join(nodeDir, "src")).CombinedOutput(); err != nil {
			b.Fatalf("copying the sources: %v: %s", err, out)
		}
		state := filepath.Join(work, "state", name)
		if err := os.RemoveAll(state); err != nil {
			b.Fatal(err)
		}
		return state
	}

	// The kernel caches node A's server compiled: Triton's layout, pushed once its gate
	// passed.
	kernels := filepath.Join(work, "kernels-a")
	writeKernelCache(b, filepath.Join(kernels, "triton"), int64(envInt("SGLPROV_BENCH_KERNEL_MB", 200))<<20)
	pusher, err := cache.New(cache.Config{Repository: repo, Push: true}, cache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	key := kcache.Key{Generation: "bench", Arch: "12.0a", Driver: "580.95.05", CUDA: "13.0"}

	seed := apply(b, recipe, node("seed"), append(cacheFlags, "--set", "push=true")...)
	progress("seeding node (apply with push: true) %.2f s", seed.Duration.Seconds())
	for _, s := range []string{"venv", "kernel", "python", "weights"} {
		if st := seed.step(b, s); st.Pushed == "" {
			b.Fatalf("the seeding node did not push %s: %s %s", s, st.Result, st.Reason)
		}
	}
	if _, err := kcache.Publish(ctx, pusher, key, kernels, filepath.Join(work, "kpush")); err != nil {
		b.Fatal(err)
	}
	envBytes, envCount := treeSize(b, venv)
	b.Logf("environment: %d MiB in %d files; kernel cache %d MiB", envBytes>>20, envCount, dirBytes(b, kernels)>>20)

	b.ResetTimer()
	b.StopTimer()
	var tA, tB, tLock, tLimit time.Duration
	for i := range b.N {
		// Node A.
		stA := node(fmt.Sprintf("a%d", i))
		a := apply(b, recipe, stA)
		tA += a.Duration
		progress("node A %.2f s", a.Duration.Seconds())

		// Node B, with the environment artifact and the kernel caches.
		stB := node(fmt.Sprintf("b%d", i))
		hubBefore, cdnBefore := hub.Connections()
		start := time.Now()
		nb := apply(b, recipe, stB, cacheFlags...)
		applied := time.Since(start)
		puller, _ := cache.New(cache.Config{Repository: repo}, cache.Options{})
		ka, _, err := kcache.Restore(ctx, puller, key, filepath.Join(nodeDir, "kernel-cache"), nil)
		if err != nil || ka == nil {
			b.Fatalf("node B's kernel caches: %v %v", ka, err)
		}
		tB += time.Since(start)
		progress("node B %.2f s", time.Since(start).Seconds())
		b.Logf("node A: %s; node B: apply %.2f s (%s), kernel caches %.2f s", stepTimes(a), applied.Seconds(), stepTimes(nb), (time.Since(start) - applied).Seconds())
		b.Logf("node B's environment: %s", lastLine(b, nb.step(b, "python").Log, "pulling and unpacking the Python environment"))
		if h, c := hub.Connections(); h != hubBefore || c != cdnBefore {
			b.Fatalf("node B asked the hub")
		}
		for _, s := range []string{"kernel", "python", "weights"} {
			if st := nb.step(b, s); st.FromCache == "" {
				b.Fatalf("node B's %s did not come from the cache: %s %s", s, st.Result, st.Reason)
			}
		}
		if out, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import big00, big01; print(big00.V)").CombinedOutput(); err != nil {
			b.Fatalf("node B's environment: %v %s", err, out)
		}
		if n := dirBytes(b, filepath.Join(nodeDir, "kernel-cache")); n != dirBytes(b, kernels) {
			b.Fatalf("node B's kernel cache: %d bytes", n)
		}

		// The limit: the same bytes from the registry alone, at once.
		lim := pullAll(b, puller, repo, filepath.Join(work, "limit"))
		tLimit += lim
		progress("limit %.2f s", lim.Seconds())
	}
	// Node B with the lock install: the environment and the venv record out of the
	// registry (once: they are not pushed again).
	deleteKinds(b, "http://"+reg.Addr+"/v2/bench/real", "application/vnd.sglprov.pyenv.v1", "application/vnd.sglprov.venv.v1")
	lockRuns := b.N
	if os.Getenv("SGLPROV_BENCH_NO_LOCK_ROW") != "" {
		lockRuns = 0 // where the time is short (a borrowed host): the lock row left out
	}
	for i := range lockRuns {
		st := node(fmt.Sprintf("l%d", i))
		start := time.Now()
		nl := apply(b, recipe, st, cacheFlags...)
		puller, _ := cache.New(cache.Config{Repository: repo}, cache.Options{})
		if _, _, err := kcache.Restore(ctx, puller, key, filepath.Join(nodeDir, "kernel-cache"), nil); err != nil {
			b.Fatal(err)
		}
		tLock += time.Since(start)
		progress("node B, lock install %.2f s", time.Since(start).Seconds())
		if s := nl.step(b, "python"); s.FromCache == "" {
			b.Fatalf("node B's lock install did not come from the cache: %s", s.Reason)
		}
	}
	n := float64(b.N)
	b.ReportMetric(tA.Seconds()/n, "nodeA-s")
	if lockRuns > 0 {
		b.ReportMetric(tLock.Seconds()/n, "nodeB-lock-s")
	}
	b.ReportMetric(tB.Seconds()/n, "nodeB-s")
	b.ReportMetric(tLimit.Seconds()/n, "limit-s")
	b.ReportMetric(tA.Seconds()/tB.Seconds(), "A/B")
	b.ReportMetric(tB.Seconds()/tLimit.Seconds(), "B/limit")
	os.RemoveAll(nodeDir)
}

// bigWheel is a wheel of project name with files files of size bytes in all: modules and
// incompressible data files, stored (not deflated) as large wheels' binaries are.
func bigWheel(b *testing.B, name string, files int, size int64, seed uint64) (string, []byte) {
	b.Helper()
	rng := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	dist := name + "-1.0"
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var rec strings.Builder
	add := func(path string, data []byte) {
		w, err := z.CreateHeader(&zip.FileHeader{Name: path, Method: zip.Store})
		if err != nil {
			b.Fatal(err)
		}
		w.Write(data)
		s := sha256.Sum256(data)
		fmt.Fprintf(&rec, "%s,sha256=%s,%d\n", path, base64.RawURLEncoding.EncodeToString(s[:]), len(data))
	}
	add(name+"/__init__.py", []byte("V = \"1.0\"\n"))
	// Half the files are modules of about 4 KiB (pip byte-compiles each), the other half
	// carry the rest of the bytes.
	const modSize = 4 << 10
	data := (files - 1) / 2
	per := (size - int64(files-1-data)*modSize) / int64(data)
	for i := range files - 1 {
		if i%2 == 0 {
			var src strings.Builder
			for j := 0; src.Len() < modSize; j++ {
				fmt.Fprintf(&src, "def f%d_%d(x):\n    return x * %d + %d\n\n", i, j, i, j)
			}
			add(fmt.Sprintf("%s/m%05d.py", name, i), []byte(src.String()))
			continue
		}
		data := make([]byte, per+int64(i%7)*512)
		rng.Read(data)
		add(fmt.Sprintf("%s/lib/part%05d.bin", name, i), data)
	}
	add(dist+".dist-info/METADATA", []byte("Metadata-Version: 2.1\nName: "+name+"\nVersion: 1.0\n"))
	add(dist+".dist-info/WHEEL", []byte("Wheel-Version: 1.0\nGenerator: sglprov-bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
	fmt.Fprintf(&rec, "%s.dist-info/RECORD,,\n", dist)
	w, _ := z.Create(dist + ".dist-info/RECORD")
	w.Write([]byte(rec.String()))
	if err := z.Close(); err != nil {
		b.Fatal(err)
	}
	return dist + "-py3-none-any.whl", buf.Bytes()
}

// writeKernelCache writes size bytes of kernels in Triton's cache layout: a folder per
// kernel hash with the cubin, its ptx-sized metadata and a json.
func writeKernelCache(b *testing.B, dir string, size int64) {
	b.Helper()
	rng := mrand.NewChaCha8([32]byte{42})
	const per = 1 << 20
	for i := int64(0); i*per < size; i++ {
		d := filepath.Join(dir, fmt.Sprintf("%064x", sha256.Sum256([]byte(fmt.Sprint(i)))))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		data := make([]byte, per)
		rng.Read(data)
		os.WriteFile(filepath.Join(d, "kernel.cubin"), data, 0o644)
		os.WriteFile(filepath.Join(d, "kernel.json"), []byte(`{"name": "kernel", "num_warps": 4}`), 0o644)
	}
}

func treeSize(b *testing.B, dir string) (int64, int) {
	var n int64
	var c int
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
			c++
		}
		return nil
	})
	return n, c
}

func dirBytes(b *testing.B, dir string) int64 {
	n, _ := treeSize(b, dir)
	return n
}

// tagsOf lists the repository's tags (base: http://HOST/v2/REPO).
func tagsOf(b *testing.B, base string) []string {
	resp, err := http.Get(base + "/tags/list")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var t struct {
		Tags []string `json:"tags"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(data, &t); err != nil {
		b.Fatal(err)
	}
	return t.Tags
}

// pullAll pulls the environment's, the weights', the kernel caches' and the build's
// artifacts from the repository at once, each into a folder of dir (removed after), and returns the time.
func pullAll(b *testing.B, c cache.Cache, repo, dir string) time.Duration {
	base := "http://" + strings.Replace(repo, "/", "/v2/", 1)
	var arts []*cache.Artifact
	for _, tag := range tagsOf(b, base) {
		a, err := c.Lookup(context.Background(), tag)
		if err != nil || a == nil {
			b.Fatal(tag, err)
		}
		switch a.Kind {
		case "application/vnd.sglprov.pyenv.v1", cache.KindDownload, kcache.Kind, cache.KindBuild:
			arts = append(arts, a)
		}
	}
	if len(arts) != 4 {
		b.Fatalf("%d artifacts to pull, want 4", len(arts))
	}
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(arts))
	for i, a := range arts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := filepath.Join(dir, fmt.Sprint(i))
			os.MkdirAll(d, 0o755)
			errs[i] = c.Pull(context.Background(), a, d)
		}()
	}
	wg.Wait()
	d := time.Since(start)
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return d
}

// deleteKinds deletes the manifests of the given artifact types from the repository.
func deleteKinds(b *testing.B, base string, kinds ...string) {
	for _, tag := range tagsOf(b, base) {
		req, _ := http.NewRequest(http.MethodGet, base+"/manifests/"+tag, nil)
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var m struct {
			ArtifactType string `json:"artifactType"`
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		json.Unmarshal(data, &m)
		found := false
		for _, k := range kinds {
			found = found || m.ArtifactType == k
		}
		if !found {
			continue
		}
		del, _ := http.NewRequest(http.MethodDelete, base+"/manifests/"+resp.Header.Get("Docker-Content-Digest"), nil)
		r, err := http.DefaultClient.Do(del)
		if err != nil || r.StatusCode != http.StatusAccepted {
			b.Fatalf("deleting %s: %v %v", tag, err, r)
		}
		r.Body.Close()
	}
}

// stepTimes lists a run's steps with their seconds, for the log.
func stepTimes(r run) string {
	var parts []string
	for _, st := range r.Steps {
		parts = append(parts, fmt.Sprintf("%s %.2f s", st.Name, st.Duration.Seconds()))
	}
	return fmt.Sprintf("%s, apply %.2f s", strings.Join(parts, ", "), r.Duration.Seconds())
}

// lastLine is the last line of the log at p that holds want (its last progress report:
// the bytes, and the rate over the whole pull and unpack, before the sync and the check).
func lastLine(b *testing.B, p, want string) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	last := ""
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, want) {
			last = l
		}
	}
	return last
}

// progress prints one row's figure as soon as it is measured (the benchmark's metrics come
// only at its end): a run cut short still shows the rows it finished.
func progress(format string, args ...any) {
	fmt.Printf("nodeb: "+format+"\n", args...)
}
