package build

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
)

// The generation key of a build names the host's nvcc, which is there before the
// generation is built, and leaves out a python inside the generation, which is not.
func TestGenerationKeyProbesTheHostOnly(t *testing.T) {
	f := newFPFixture(t, false)
	gen := filepath.Join(f.root, "gen")
	f.env.Generation = &engine.GenerationInfo{Dir: gen}
	f.spec.Python = filepath.Join(gen, "venv", "bin", "python")
	s := newStep(t, f.spec)
	s.host = f.host
	parts, err := s.GenerationKey(context.Background(), f.env)
	if err != nil {
		t.Fatal(err)
	}
	if parts["toolchain.nvcc"] == "" || parts["toolchain.nvcc"] == "absent" {
		t.Errorf("the key has no nvcc: %v", parts)
	}
	if _, ok := parts["toolchain.python"]; ok {
		t.Errorf("the key probes the generation's own python: %v", parts)
	}
	before := parts["toolchain.nvcc"]
	fakeNVCC(t, f.bin, "13.0, V13.0.48")
	parts, _ = s.GenerationKey(context.Background(), f.env)
	if parts["toolchain.nvcc"] == before {
		t.Errorf("a new nvcc leaves the key as it was: %q", before)
	}
}
