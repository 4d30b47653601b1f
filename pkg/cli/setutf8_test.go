package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// A --set value that is not UTF-8 (a served name) is bad input of every command that
// reads the recipe: exit 2 with the var, the bytes and the fix, no panic, and an apply
// writes no textfile and records no run.
func TestSetNotUTF8IsRefused(t *testing.T) {
	dir := t.TempDir()
	recipe := writeRecipe(t, dir, "apiVersion: sglprov/v1\nname: r\nvars: {served_name: qwen}\nsteps:\n"+
		"  - name: a\n    command: {argv: [\"true\", \"{{ .vars.served_name }}\"]}\n")
	state := filepath.Join(dir, "state")
	textfile := filepath.Join(dir, "tf", "r.prom")
	for _, args := range [][]string{
		{"validate"},
		{"plan", "--state-dir", state},
		{"apply", "--state-dir", state, "--textfile", textfile},
		{"daemon", "--state-dir", state, "--textfile", textfile, "--metrics-addr", "127.0.0.1:0"},
	} {
		args = append(args, "-f", recipe, "--set", "served_name=qwen\xff3.5")
		code, _, stderr := run(t, nil, args...)
		if code != exitcode.ExitUsage || !strings.Contains(stderr, `--set served_name: the value "qwen\xff3.5" is not valid UTF-8: give it in UTF-8`) {
			// Fatal: a daemon that took the value would run on.
			t.Fatalf("%s: exit %d, stderr %q; want exit 2 naming the var and the fix", args[0], code, stderr)
		}
		if strings.Contains(stderr, "panic") {
			t.Errorf("%s panicked: %s", args[0], stderr)
		}
	}
	for _, p := range []string{textfile, filepath.Join(state, "runs")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v; want nothing written", p, err)
		}
	}
}
