package ociregistry

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a helper ended the test instead of ending it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// With no registry built or installed, a test that needs one is skipped with the reason
// and the way to get one, whoever runs it (root included: `make deps` may not have run).
func TestStartSkipsWithoutARegistry(t *testing.T) {
	t.Chdir(t.TempDir()) // outside the checkout: no bin/registry
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvExecutable, "")
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartWithT(r, Options{})
	}()
	<-done
	if r.failed != "" || !strings.Contains(r.skipped, "no OCI registry is installed") || !strings.Contains(r.skipped, "make deps") {
		t.Errorf("without a registry: skipped %q, failed %q; want a skip that says make deps builds one", r.skipped, r.failed)
	}
}
