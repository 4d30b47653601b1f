package cache_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// BenchmarkPushVsPull pushes 4 files of SGLPROV_BENCH_PUSH_MB MiB (default 128) to the
// real registry (ociregistry.Find's, on loopback) as one artifact, then pulls the
// artifact into an empty folder, each iteration into a repository of its own (so every
// blob is sent again). It reports each side's MB/s and push/pull, the ratio
// docs/benchmarks.md gives, and each side's CPU seconds per iteration split between this
// process (the client) and the registry's: on a loaded host the CPU both sides need, not
// the bytes, decides the ratio. SGLPROV_BENCH_CHUNK_MB sets the push's chunk size (default
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
	var push, pull, pushClient, pullClient, pushReg, pullReg time.Duration
	// cpu returns this process's and the registry's CPU time so far.
	cpu := func() (time.Duration, time.Duration) {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		r, err := reg.CPUTime()
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), r
	}
	b.ResetTimer()
	for i := range b.N {
		repo := fmt.Sprintf("%s/bench/run%d", reg.Addr, i)
		pusher, err := cache.New(cache.Config{Repository: repo, Push: true}, cache.Options{ChunkSize: chunk})
		if err != nil {
			b.Fatal(err)
		}
		c0, r0 := cpu()
		start := time.Now()
		if _, err := pusher.Push(ctx, "t", cache.KindDownload, []byte(`{}`), files); err != nil {
			b.Fatal(err)
		}
		push += time.Since(start)
		c1, r1 := cpu()
		pushClient += c1 - c0
		pushReg += r1 - r0
		puller, err := cache.New(cache.Config{Repository: repo}, cache.Options{})
		if err != nil {
			b.Fatal(err)
		}
		c0, r0 = cpu()
		start = time.Now()
		a, err := puller.Lookup(ctx, "t")
		if err != nil || a == nil {
			b.Fatalf("lookup: %v, %v", a, err)
		}
		if err := puller.Pull(ctx, a, b.TempDir()); err != nil {
			b.Fatal(err)
		}
		pull += time.Since(start)
		c1, r1 = cpu()
		pullClient += c1 - c0
		pullReg += r1 - r0
	}
	b.StopTimer()
	bytes := float64(total) * float64(b.N)
	b.ReportMetric(bytes/push.Seconds()/1e6, "push-MB/s")
	b.ReportMetric(bytes/pull.Seconds()/1e6, "pull-MB/s")
	b.ReportMetric(pull.Seconds()/push.Seconds(), "push/pull")
	n := float64(b.N)
	b.ReportMetric(pushClient.Seconds()/n, "push-client-cpu-s")
	b.ReportMetric(pushReg.Seconds()/n, "push-registry-cpu-s")
	b.ReportMetric(pullClient.Seconds()/n, "pull-client-cpu-s")
	b.ReportMetric(pullReg.Seconds()/n, "pull-registry-cpu-s")
}
