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
	r, err := Start(t.TempDir())
	if errors.Is(err, ErrMissing) && os.Geteuid() != 0 {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}
