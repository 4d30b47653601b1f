package pylock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/fetch"
	"github.com/sglprov/sglprov/pkg/pylock"
	"github.com/sglprov/sglprov/test/ociregistry"
	"github.com/sglprov/sglprov/test/pyindex"
)

// BenchmarkNodeBFromRegistryVsIndex: a Python step on node B, side by side: pip resolving
// and installing "top" and its SGLPROV_BENCH_WHEELS dependencies (default 30, each wheel
// about SGLPROV_BENCH_WHEEL_KB KiB, default 512) from a local package index, against the
// same set installed from the lock node A published to the real registry (the lock looked
// up, the wheels pulled, pip install --require-hashes --no-deps --no-index). Each side
// starts from a fresh venv (not timed). It reports each side's seconds and index/registry.
func BenchmarkNodeBFromRegistryVsIndex(b *testing.B) {
	py := pyindex.NeedPip(b)
	n, kb := 30, 512
	if v, err := strconv.Atoi(os.Getenv("SGLPROV_BENCH_WHEELS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("SGLPROV_BENCH_WHEEL_KB")); err == nil && v > 0 {
		kb = v
	}
	ctx := context.Background()
	ix := pyindex.Start(b)
	reg := ociregistry.StartT(b)
	var deps []string
	for i := range n {
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

	// Node A: resolve, lock, publish.
	a := b.TempDir()
	pyA, siteA := pyindex.Venv(b, py, filepath.Join(a, "venv"))
	report := filepath.Join(a, "report.json")
	cmd := exec.Command(pyA, "-m", "pip", "install", "--index-url", ix.URL(), "top")
	cmd.Env = pyindex.PipEnv("PIP_REPORT=" + report)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("node A: %v: %s", err, out)
	}
	lock, err := pylock.Scan(siteA, []string{report})
	if err != nil {
		b.Fatal(err)
	}
	if err := pylock.Collect(ctx, lock, filepath.Join(a, "wheels"), fetch.Options{}); err != nil {
		b.Fatal(err)
	}
	c, err := cache.New(cache.Config{Repository: reg.Addr + "/bench/py", Push: true}, cache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	tag := strings.Repeat("be", 32)
	if _, err := pylock.Publish(ctx, c, tag, lock, filepath.Join(a, "wheels")); err != nil {
		b.Fatal(err)
	}

	var fromIndex, fromRegistry time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		dir := b.TempDir()
		pyI, _ := pyindex.Venv(b, py, filepath.Join(dir, "index"))
		pyR, _ := pyindex.Venv(b, py, filepath.Join(dir, "registry"))
		b.StartTimer()
		start := time.Now()
		cmd := exec.Command(pyI, "-m", "pip", "install", "--index-url", ix.URL(), "top")
		cmd.Env = pyindex.PipEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("from the index: %v: %s", err, out)
		}
		fromIndex += time.Since(start)
		start = time.Now()
		wheels := filepath.Join(dir, fmt.Sprintf("wheels%d", i))
		l, _, err := pylock.FromCache(ctx, c, tag, wheels)
		if err != nil || l == nil {
			b.Fatalf("from the registry: %v, %v", l, err)
		}
		if err := pylock.Install(ctx, pyR, l, pylock.InstallOptions{WheelDir: wheels, Env: pyindex.PipEnv()}); err != nil {
			b.Fatal(err)
		}
		fromRegistry += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(fromIndex.Seconds()/float64(b.N), "index-s")
	b.ReportMetric(fromRegistry.Seconds()/float64(b.N), "registry-s")
	b.ReportMetric(fromIndex.Seconds()/fromRegistry.Seconds(), "index/registry")
}
