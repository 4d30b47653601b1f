package engine_test

import (
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// importClosure returns every import path pkg (a module path such as "pkg/hostcmd") reaches,
// module packages followed through their own imports, others (the standard library,
// go-nvml) listed but not followed. Test files are not read.
func importClosure(t *testing.T, pkg string) []string {
	t.Helper()
	const module = "github.com/sglprov/sglprov/"
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	seen := map[string]bool{}
	var walk func(path string)
	walk = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		if !strings.HasPrefix(path, module) {
			return
		}
		p, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		for _, imp := range p.Imports {
			walk(imp)
		}
	}
	walk(module + pkg)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Checking a command's version against a range needs the range parser, not the GPU
// facts: hostcmd depends on the leaf package versions, never on gpu and its NVML binding.
func TestHostcmdDoesNotLinkNVML(t *testing.T) {
	for _, p := range importClosure(t, "pkg/hostcmd") {
		if strings.Contains(p, "nvml") || strings.HasSuffix(p, "/pkg/gpu") {
			t.Errorf("pkg/hostcmd reaches %s; the range parser lives in pkg/versions", p)
		}
	}
}

// A recipe is configuration: parsing one reads YAML and checks ranges, never the host.
// pkg/recipe reaches no package that probes GPUs, commands, ports or the network, nor
// NVML; the packages that act on requirements (gpu, fitness, hostcmd) take its types.
func TestRecipeIsOnlyConfiguration(t *testing.T) {
	host := []string{"/pkg/gpu", "/pkg/nccl", "/pkg/portowner", "/pkg/fitness", "/pkg/hostcmd",
		"/pkg/engine", "/pkg/service", "/pkg/cache", "/pkg/fetch"}
	for _, p := range importClosure(t, "pkg/recipe") {
		if strings.Contains(p, "nvml") {
			t.Errorf("pkg/recipe reaches %s", p)
		}
		for _, h := range host {
			if strings.HasSuffix(p, h) {
				t.Errorf("pkg/recipe reaches %s, a package that acts on the host", p)
			}
		}
	}
}

// Every exit code has one name, in pkg/exitcode: the engine declares no second name for
// an exit error, an exit code or the mapping between them.
func TestOneNamePerExitCode(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Dir(file), func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatalf("parsing pkg/engine: %v", err)
	}
	names := regexp.MustCompile(`^(Err(Usage|Gate|Host|Missing|Locked|Reboot|Interrupted)|Exit[A-Z]\w*|ExitCode|Message)$`)
	for _, p := range pkgs {
		for name, f := range p.Files {
			for ident, obj := range f.Scope.Objects {
				if names.MatchString(ident) {
					t.Errorf("%s declares %s (%s); the exit codes and their errors are pkg/exitcode's", filepath.Base(name), ident, obj.Kind)
				}
			}
		}
	}
}

// The generations record's path is spelt once (GenerationsRecordPath): no other file of
// the engine, the command layer or the daemon joins it by hand.
func TestGenerationsRecordPathSpeltOnce(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for _, dir := range []string{"pkg/engine", "pkg/cli", "pkg/daemon"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, filepath.Join("engine", "state.go")) {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `"generations", `) {
				t.Errorf("%s joins the generations record's path itself; use engine.GenerationsRecordPath", filepath.Join(dir, filepath.Base(f)))
			}
		}
	}
}
