package engine_test

import (
	"go/build"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The libraries never import the engine, a step kind or the command line, directly or
// through one another: data flows recipe, plan, run, state, and the libraries stay usable
// on their own.
func TestLibrariesDoNotImportTheEngine(t *testing.T) {
	const module = "github.com/sglprov/sglprov/"
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	libraries := []string{"atomicfile", "buildinfo", "cache", "console", "exitcode", "fetch",
		"generation", "gitrepo", "gpu", "hostcmd", "hostpath", "hub", "logval", "multinode", "ownership", "pkgmgr", "recipe", "redact",
		"safefile", "safetensors", "service", "smoke", "treelock", "versions"}
	forbidden := []string{module + "pkg/engine", module + "pkg/steps", module + "pkg/cli", module + "pkg/daemon"}
	for _, lib := range libraries {
		seen := map[string]bool{}
		var walk func(path string, chain []string)
		walk = func(path string, chain []string) {
			if seen[path] {
				return
			}
			seen[path] = true
			for _, f := range forbidden {
				if path == f || strings.HasPrefix(path, f+"/") {
					t.Errorf("pkg/%s imports %s (through %s)", lib, path, strings.Join(chain, " -> "))
					return
				}
			}
			pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
			if err != nil {
				t.Fatalf("reading %s: %v", path, err)
			}
			for _, imp := range pkg.Imports {
				if strings.HasPrefix(imp, module) {
					walk(imp, append(chain, imp))
				}
			}
		}
		walk(module+"pkg/"+lib, []string{"pkg/" + lib})
	}
}
