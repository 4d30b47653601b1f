package ociregistry

import (
	"errors"
	"os"
	"testing"
)

// StartT starts a registry for the test t and stops it when t ends. Without the
// executable the test is skipped, unless it runs as root: then `make deps` should have
// installed it, and the test fails.
func StartT(t testing.TB) *Registry {
	t.Helper()
	return StartWithT(t, Options{})
}

// StartWithT is StartT with options.
func StartWithT(t testing.TB, opt Options) *Registry {
	t.Helper()
	r, err := StartWith(t.TempDir(), opt)
	if errors.Is(err, ErrMissing) && os.Geteuid() != 0 {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("registry %s at %s", r.Executable, r.Addr)
	t.Cleanup(r.Stop)
	return r
}
