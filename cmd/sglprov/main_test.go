package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sglprov/sglprov/internal/foreign"
	"github.com/sglprov/sglprov/pkg/cli"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// fakes are the test servers the scripts start, built once per test binary run.
var fakes = map[string]string{
	"fake-sglang": "./test/fakesglang/cmd/fake-sglang",
	"fake-hub":    "./test/fakehub/cmd/fake-hub",
}

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"sglprov": func() {
			os.Exit(cli.Main(os.Args, cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
		},
	})
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// buildFakes builds the fake servers into one folder that the scripts get on PATH.
func buildFakes(t *testing.T) string {
	root := repoRoot(t)
	dir := t.TempDir()
	for name, pkg := range fakes {
		if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
			continue
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
	}
	return dir
}

func TestScripts(t *testing.T) {
	root := repoRoot(t)
	bin := buildFakes(t)
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join(root, "testdata", "script"),
		RequireExplicitExec: true,
		// [registry]: a real OCI registry can be started (ociregistry.Find finds one), or
		// this is root, where `make deps` installs it and its absence is a failure.
		// [promtool]: Prometheus's promtool is there, or this is root (make deps installs it).
		// [cudanvcc]: this host has nvcc where sglprov looks off the PATH.
		Condition: func(cond string) (bool, error) {
			if cond == "cudanvcc" {
				_, err := os.Stat("/usr/local/cuda/bin/nvcc")
				return err == nil, nil
			}
			var bin string
			switch cond {
			case "registry":
				_, err := ociregistry.Find()
				return err == nil || os.Geteuid() == 0, nil
			case "promtool":
				bin = "promtool"
			default:
				return false, fmt.Errorf("unknown condition %q", cond)
			}
			_, err := exec.LookPath(bin)
			return err == nil || os.Geteuid() == 0, nil
		},
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", bin+string(os.PathListSeparator)+env.Getenv("PATH"))
			env.Setenv("TESTDATA", filepath.Join(root, "testdata"))
			env.Setenv("REPO", root)
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("GIT_AUTHOR_NAME", "t")
			env.Setenv("GIT_AUTHOR_EMAIL", "t@example.invalid")
			env.Setenv("GIT_COMMITTER_NAME", "t")
			env.Setenv("GIT_COMMITTER_EMAIL", "t@example.invalid")
			env.Setenv("SGLPROV_GPU_FIXTURE", filepath.Join(root, "testdata", "gpu", "rtx-pro-6000-x8.json"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// exits N PROG ARGS... runs a program and checks that it exits with status N;
			// its output becomes stdout and stderr for the checks that follow.
			"exits": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 2 {
					ts.Fatalf("usage: exits N PROG [ARGS...]")
				}
				var want int
				if _, err := fmt.Sscanf(args[0], "%d", &want); err != nil {
					ts.Fatalf("exits: bad status %q", args[0])
				}
				path := lookPath(ts, args[1])
				cmd := exec.Command(path, args[2:]...)
				cmd.Dir = ts.MkAbs(".")
				cmd.Env = environ(ts)
				cmd.Stdout, cmd.Stderr = ts.Stdout(), ts.Stderr()
				err := cmd.Run()
				got := 0
				if ee, ok := err.(*exec.ExitError); ok {
					got = ee.ExitCode()
				} else if err != nil {
					ts.Fatalf("exits: running %s: %v", args[1], err)
				}
				if (got == want) == neg {
					ts.Fatalf("%s exited %d, want %d", args[1], got, want)
				}
			},
			// foreign build ROOT RECORD [REL...] writes under ROOT the files sglprov never
			// wrote (internal/foreign: etc/passwd, a user's home, another recipe's
			// generation, an admin's unit, a unit of the system) and the files REL, and their digests to RECORD; foreign check
			// RECORD fails unless every one is byte-identical.
			"foreign": func(ts *testscript.TestScript, neg bool, args []string) {
				switch {
				case !neg && len(args) >= 3 && args[0] == "build":
					tree, err := foreign.Build(ts.MkAbs(args[1]), args[3:]...)
					ts.Check(err)
					ts.Check(tree.Save(ts.MkAbs(args[2])))
				case !neg && len(args) == 2 && args[0] == "check":
					tree, err := foreign.Load(ts.MkAbs(args[1]))
					ts.Check(err)
					if changed := tree.Changed(); len(changed) > 0 {
						ts.Fatalf("files sglprov never wrote changed:\n%s", strings.Join(changed, "\n"))
					}
				default:
					ts.Fatalf("usage: foreign build ROOT RECORD [REL...] | foreign check RECORD")
				}
			},
			// freeport NAME sets $NAME to a TCP port on loopback that was free a moment ago
			// (for a server that sglprov itself starts on a port the recipe names).
			"freeport": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: freeport NAME")
				}
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					ts.Fatalf("freeport: %v", err)
				}
				port := l.Addr().(*net.TCPAddr).Port
				l.Close()
				ts.Setenv(args[0], strconv.Itoa(port))
			},
			// waitgrep PATTERN PATH waits up to 30 s for the file's content to match PATTERN.
			"waitgrep": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: waitgrep PATTERN PATH")
				}
				re, err := regexp.Compile(args[0])
				if err != nil {
					ts.Fatalf("waitgrep: %v", err)
				}
				path := ts.MkAbs(args[1])
				var last []byte
				for i := 0; i < 600; i++ {
					if b, err := os.ReadFile(path); err == nil {
						last = b
						if re.Match(b) {
							return
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
				ts.Fatalf("%s never matched %q; last content:\n%s", args[1], args[0], last)
			},
			// waitexec PATTERN PROG ARGS... re-runs a program until its output matches PATTERN
			// (up to 30 s).
			"waitexec": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 2 {
					ts.Fatalf("usage: waitexec PATTERN PROG [ARGS...]")
				}
				re, err := regexp.Compile(args[0])
				if err != nil {
					ts.Fatalf("waitexec: %v", err)
				}
				var out []byte
				for i := 0; i < 150; i++ {
					cmd := exec.Command(lookPath(ts, args[1]), args[2:]...)
					cmd.Dir = ts.MkAbs(".")
					cmd.Env = environ(ts)
					out, _ = cmd.CombinedOutput()
					if re.Match(out) {
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
				ts.Fatalf("%s never printed %q; last output:\n%s", args[1], args[0], out)
			},
			// registry starts a real OCI registry (distribution, ociregistry.Find's) on a free
			// loopback port for the rest of the script, and sets $REGISTRY to its address.
			"registry": func(ts *testscript.TestScript, neg bool, args []string) {
				r, err := ociregistry.Start(ts.MkAbs("registry"))
				if err != nil {
					ts.Fatalf("%v", err)
				}
				ts.Defer(r.Stop)
				ts.Setenv("REGISTRY", r.Addr)
			},
			// waitfile PATH waits up to 20 s for a file to exist (a fake server's port file).
			"waitfile": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: waitfile PATH")
				}
				if err := waitFile(ts.MkAbs(args[0])); err != nil {
					ts.Fatalf("%v", err)
				}
			},
		},
	})
}

// lookPath finds a program on the script's PATH (not the test process's).
func lookPath(ts *testscript.TestScript, name string) string {
	if strings.Contains(name, "/") {
		return ts.MkAbs(name)
	}
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}

// environ returns the script's environment for a child process.
func environ(ts *testscript.TestScript) []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "WORK", "TESTDATA", "REPO", "SGLPROV_GPU_FIXTURE", "SGLPROV_GPU_CLAIMS_DIR", "SGLPROV_STATE_DIRS_DIR",
		"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "HF_TOKEN", "HF_ENDPOINT", "CUDA_HOME", "GOTRACEBACK", "REGISTRY", "DOCKER_CONFIG", "SGLPROV_SMOKE_SEED"} {
		if v := ts.Getenv(k); v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

func waitFile(path string) error {
	for i := 0; i < 400; i++ {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not appear", path)
}
