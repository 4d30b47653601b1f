package ociregistry

import (
	"errors"
	"testing"
)

// StartT starts a registry for the test t and stops it when t ends. Without the
// executable the test is skipped with the reason (ErrMissing says how to build or install
// one), as root too: `make deps` may not have run.
func StartT(t testing.TB) *Registry {
	t.Helper()
	return StartWithT(t, Options{})
}

// StartWithT is StartT with options.
func StartWithT(t testing.TB, opt Options) *Registry {
	t.Helper()
	r, err := StartWith(t.TempDir(), opt)
	if errors.Is(err, ErrMissing) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("registry %s at %s", r.Executable, r.Addr)
	t.Cleanup(r.Stop)
	return r
}
