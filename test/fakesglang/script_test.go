package fakesglang_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sglprov/sglprov/pkg/cli"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// TestMain makes the test binary double as `sglprov` (its smoke command only) and
// `fake-sglang` for the scripts.
func TestMain(m *testing.M) {
	os.Exit(testscript.RunMain(m, map[string]func() int{
		"sglprov": func() int {
			if len(os.Args) < 2 || os.Args[1] != "smoke" {
				fmt.Fprintln(os.Stderr, "this test build of sglprov has only the smoke command")
				return 2
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return cli.SmokeMain(ctx, os.Args[2:], os.Stdout, os.Stderr)
		},
		"fake-sglang": func() int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return fakesglang.Main(ctx, os.Args[1:], os.Stderr, os.Getenv)
		},
	}))
}

// TestSmokeScripts runs testdata/script/smoke_*.txtar against the real smoke command
// and the fake server.
func TestSmokeScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "script", "smoke_*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no smoke scripts: %v", err)
	}
	testscript.Run(t, testscript.Params{
		Files:               files,
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":    cmdExits,
			"waitfile": cmdWaitFile,
		},
	})
}

// cmdExits is `exits N PROG ARGS...`: run a program and check that it exits with status N.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: exits N PROG [ARGS...]")
	}
	var want int
	if _, err := fmt.Sscanf(args[0], "%d", &want); err != nil {
		ts.Fatalf("exits: bad status %q", args[0])
	}
	path, err := exec.LookPath(args[1])
	if err != nil {
		path = args[1]
	}
	cmd := exec.Command(path, args[2:]...)
	cmd.Dir = ts.MkAbs(".")
	cmd.Env = []string{"PATH=" + ts.Getenv("PATH"), "HOME=" + ts.Getenv("HOME")}
	cmd.Stdout, cmd.Stderr = ts.Stdout(), ts.Stderr()
	err = cmd.Run()
	got := 0
	if ee, ok := err.(*exec.ExitError); ok {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("exits: running %s: %v", args[1], err)
	}
	if (got == want) == neg {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// cmdWaitFile is `waitfile PATH`: wait up to 20 s for a file to appear (a port file).
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: waitfile PATH")
	}
	path := ts.MkAbs(args[0])
	for range 400 {
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.Fatalf("%s did not appear", args[0])
}
