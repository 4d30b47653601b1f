package cli

import (
	"strings"
	"testing"
)

// Every command parses its flags before it does anything: describing it (running it with
// --help and the describe hook) returns its flags and changes nothing.
func TestEveryCommandDescribesItself(t *testing.T) {
	cmds := describeAll(IO{})
	if len(cmds) != len(commands()) {
		t.Fatalf("%d commands described, %d known", len(cmds), len(commands()))
	}
	withFlags := map[string]bool{"validate": true, "plan": true, "apply": true, "detect": true, "smoke": true, "status": true, "daemon": true, "version": true}
	for _, c := range cmds {
		if withFlags[c.Name] && len(c.Flags) == 0 {
			t.Errorf("%s: no flags described", c.Name)
		}
		if c.Summary == "" || strings.Contains(c.Summary, "\n") {
			t.Errorf("%s: the summary must be one line: %q", c.Name, c.Summary)
		}
	}
}

// The man page has every command and every flag the help shows.
func TestManPageHasEveryFlag(t *testing.T) {
	code, man, stderr := run(t, nil, "man")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, c := range describeAll(IO{}) {
		if !strings.Contains(man, ".SS \""+strings.ReplaceAll(c.Synopsis(), "-", `\-`)+"\"") {
			t.Errorf("no section for %s", c.Name)
		}
		for _, f := range c.Flags {
			for _, w := range f.Words() {
				if !strings.Contains(man, `\fB`+strings.ReplaceAll(w, "-", `\-`)+`\fR`) {
					t.Errorf("%s: flag %s is not in the man page", c.Name, w)
				}
			}
		}
	}
}

// The help shows a flag once, its short form beside its long one, and a default once.
func TestCommandHelpShowsEachFlagOnce(t *testing.T) {
	for _, c := range commands() {
		code, out, stderr := run(t, nil, c.name, "--help")
		if code != 0 || stderr != "" {
			t.Fatalf("%s --help: exit %d, stderr %q", c.name, code, stderr)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s: default shown twice: %q", c.name, line)
			}
		}
		if strings.Contains(out, "--recipe") && !strings.Contains(out, "-f, --recipe FILE") {
			t.Errorf("%s: -f and --recipe not shown as one flag:\n%s", c.name, out)
		}
		if strings.Count(out, "--recipe") > 1 {
			t.Errorf("%s: --recipe shown more than once:\n%s", c.name, out)
		}
	}
}

func TestNearest(t *testing.T) {
	for in, want := range map[string]string{
		"aply": "apply", "apply": "apply", "plna": "plan", "stauts": "status", "val": "validate",
		"verison": "version", "schem": "schema", "compleiton": "completion", "deamon": "daemon",
		"frobnicate": "", "x": "", "": "",
	} {
		if got := nearest(in); got != want {
			t.Errorf("nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
