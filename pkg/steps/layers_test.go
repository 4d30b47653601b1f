package steps_test

import (
	"go/build"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/steps"
)

// No step kind imports another, directly or through a package in between: what kinds
// share (running a child command, its progress) lives in a package of its own.
func TestStepKindsDoNotImportEachOther(t *testing.T) {
	const module = "github.com/sglprov/sglprov/"
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(file)
	kinds := map[string]bool{}
	for name := range steps.Registry() {
		kinds[module+"pkg/steps/"+name] = true
	}
	for kind := range kinds {
		seen := map[string]bool{}
		var walk func(path string, chain []string)
		walk = func(path string, chain []string) {
			if seen[path] {
				return
			}
			seen[path] = true
			if path != kind && kinds[path] {
				t.Errorf("%s imports the step kind %s (through %s)", kind, path, strings.Join(chain, " -> "))
				return
			}
			if !strings.HasPrefix(path, module) {
				return
			}
			p, err := build.ImportDir(filepath.Join(root, "..", "..", strings.TrimPrefix(path, module)), 0)
			if err != nil {
				t.Fatalf("reading %s: %v", path, err)
			}
			for _, imp := range p.Imports {
				walk(imp, append(chain, imp))
			}
		}
		walk(kind, []string{kind})
	}
}
