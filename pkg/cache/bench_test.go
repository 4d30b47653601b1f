package cache_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// BenchmarkPushVsPull pushes 4 files of SGLPROV_BENCH_PUSH_MB MiB (default 128) to the
// real registry (Debian's docker-registry on loopback) as one artifact, then pulls the
// artifact into an empty folder, each iteration into a repository of its own (so every
// blob is sent again). It reports each side's MB/s and push/pull, the ratio
// docs/benchmarks.md gives. SGLPROV_BENCH_CHUNK_MB sets the push's chunk size (default
// pkg/cache's 64 MiB).
func BenchmarkPushVsPull(b *testing.B) {
	mb := 128
	if v, err := strconv.Atoi(os.Getenv("SGLPROV_BENCH_PUSH_MB")); err == nil && v > 0 {
		mb = v
	}
	var chunk int64
	if v, err := strconv.Atoi(os.Getenv("SGLPROV_BENCH_CHUNK_MB")); err == nil && v > 0 {
		chunk = int64(v) << 20
	}
	reg := ociregistry.StartT(b)
	src := b.TempDir()
	var files []cache.File
	var total int64
	for i := range 4 {
		f := writeRandom(b, filepath.Join(src, fmt.Sprintf("model-%d.safetensors", i)), mb<<20)
		f.Mode = 0o644
		files = append(files, f)
		total += f.Size
	}
	ctx := context.Background()
	var push, pull time.Duration
	b.ResetTimer()
	for i := range b.N {
		repo := fmt.Sprintf("%s/bench/run%d", reg.Addr, i)
		pusher, err := cache.New(cache.Config{Repository: repo, Push: true}, cache.Options{ChunkSize: chunk})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := pusher.Push(ctx, "t", cache.KindDownload, []byte(`{}`), files); err != nil {
			b.Fatal(err)
		}
		push += time.Since(start)
		puller, err := cache.New(cache.Config{Repository: repo}, cache.Options{})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		a, err := puller.Lookup(ctx, "t")
		if err != nil || a == nil {
			b.Fatalf("lookup: %v, %v", a, err)
		}
		if err := puller.Pull(ctx, a, b.TempDir()); err != nil {
			b.Fatal(err)
		}
		pull += time.Since(start)
	}
	b.StopTimer()
	bytes := float64(total) * float64(b.N)
	b.ReportMetric(bytes/push.Seconds()/1e6, "push-MB/s")
	b.ReportMetric(bytes/pull.Seconds()/1e6, "pull-MB/s")
	b.ReportMetric(pull.Seconds()/push.Seconds(), "push/pull")
}
