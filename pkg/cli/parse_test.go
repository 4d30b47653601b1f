package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// parseIO is an IO for parsing alone: nothing to read, nothing shown.
func parseIO() IO {
	return IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
}

// A command line parses into the command's options without running anything: the body
// given in place of the command's own (cli/cli's runF) sees the options, and the state
// dir the flags name is never made.
func TestApplyParsesIntoOptions(t *testing.T) {
	state := filepath.Join(t.TempDir(), "st")
	var got *applyOptions
	run := cmd(parseApply, func(_ context.Context, _ IO, o *applyOptions) error { got = o; return nil })
	err := run(context.Background(), parseIO(), []string{"r.yaml", "--only", "a,b", "--only", "c", "--force=d", "--verify",
		"--jobs", "2", "--set", "port=1", "--state-dir", state, "--textfile", "m.prom"})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("the run was not called")
	}
	if got.recipe != "r.yaml" || !slices.Equal(splitList(got.only.String()), []string{"a", "b", "c"}) ||
		!slices.Equal(splitList(got.force.String()), []string{"d"}) || !got.verify || got.jobs != 2 ||
		!slices.Equal(got.sets, kvList{"port=1"}) || got.stateDirPath() != state || got.textfile != "m.prom" {
		t.Errorf("options = %+v", got)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("parsing made the state dir: %v", err)
	}
}

// Bad command lines are usage errors (exit 2) before any run: an unknown flag, a bad
// --set, a second recipe, the daemon's durations and --root, rollback without -f.
func TestBadCommandLinesAreUsageErrors(t *testing.T) {
	ran := false
	never := func(context.Context, IO, *daemonOptions) error { ran = true; return nil }
	for _, tc := range []struct {
		name string
		run  func(context.Context, IO, []string) error
		args []string
		want string
	}{
		{"apply", cmd(parseApply, func(context.Context, IO, *applyOptions) error { ran = true; return nil }), []string{"--frobnicate"}, "flag provided but not defined: --frobnicate"},
		{"apply", cmd(parseApply, func(context.Context, IO, *applyOptions) error { ran = true; return nil }), []string{"--set", "novalue"}, "want KEY=VALUE"},
		{"plan", cmd(parsePlan, func(context.Context, IO, *planOptions) error { ran = true; return nil }), []string{"a.yaml", "b.yaml"}, "one recipe per command"},
		{"daemon", cmd(parseDaemon, never), []string{"-f", "r.yaml", "--interval", "0s"}, "must be positive"},
		{"daemon", cmd(parseDaemon, never), []string{"-f", "r.yaml", "--root", "/mnt"}, "the daemon watches a running node"},
		{"rollback", cmd(parseRollback, func(context.Context, IO, *rollbackOptions) error { ran = true; return nil }), nil, "-f RECIPE is required"},
		{"rollback", cmd(parseRollback, func(context.Context, IO, *rollbackOptions) error { ran = true; return nil }), []string{"-f", "r.yaml", "--root", "/mnt"}, "--root is not supported"},
	} {
		err := tc.run(context.Background(), parseIO(), tc.args)
		if exitCodeOf(err) != exitcode.ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v (exit %d), want exit 2 with %q", tc.name, tc.args, err, exitCodeOf(err), tc.want)
		}
	}
	if ran {
		t.Error("a command ran after a bad command line")
	}
}

// The daemon's -f repeats, and its defaults are the documented ones; rollback's --to and
// the Python lock's -o reach their options.
func TestDaemonRollbackPylockOptions(t *testing.T) {
	d, err := parseDaemon(parseIO(), []string{"-f", "a.yaml", "--recipe", "b.yaml", "--metrics-addr", ""})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.files, multi{"a.yaml", "b.yaml"}) || d.interval != time.Minute || d.canaryTimeout != 2*time.Minute ||
		d.failures != 3 || d.restarts != 1 || d.metricsAddr != "" {
		t.Errorf("daemon options = %+v", d)
	}
	if d, err := parseDaemon(parseIO(), nil); err != nil || !slices.Equal(d.files, multi{""}) {
		t.Errorf("daemon without -f: %v, %v; want one empty file (loading says give -f RECIPE)", d, err)
	}
	rb, err := parseRollback(parseIO(), []string{"-f", "r.yaml", "--to", "abc123"})
	if err != nil || rb.to != "abc123" || rb.recipe != "r.yaml" {
		t.Errorf("rollback options = %+v, %v", rb, err)
	}
	pl, err := parsePylock(parseIO(), []string{"-f", "r.yaml", "-o", "out.lock.json"})
	if err != nil || pl.out != "out.lock.json" || pl.recipe != "r.yaml" {
		t.Errorf("pylock options = %+v, %v", pl, err)
	}
}

// The Python lock command answers to pylock and to lock, its older name.
func TestPylockAnswersToLock(t *testing.T) {
	for _, name := range []string{"pylock", "lock"} {
		c, ok := lookup(name)
		if !ok || c.name != "pylock" {
			t.Errorf("lookup(%q) = %q, %v; want pylock", name, c.name, ok)
		}
	}
}
