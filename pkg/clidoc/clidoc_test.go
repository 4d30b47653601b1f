package clidoc

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// Describe makes two flags on one variable one flag with two names, puts the common ones
// after the command's own, leaves the hidden ones out and shows a default once.
func TestDescribe(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var recipe, root string
	var jobs int
	fs.StringVar(&recipe, "f", "", "recipe `FILE`")
	fs.StringVar(&recipe, "recipe", "", "recipe `FILE`")
	fs.StringVar(&root, "root", "", "root `DIR`")
	fs.IntVar(&jobs, "jobs", 4, "steps to run at once")
	got := Describe(fs, map[string]bool{"f": true, "recipe": true, "root": true}, map[string]bool{"root": true})
	if len(got) != 2 {
		t.Fatalf("Describe = %+v, want 2 flags", got)
	}
	if got[0].Long != "jobs" || got[0].Column() != "    --jobs N" || got[0].Text() != "steps to run at once (default 4)" || got[0].Common {
		t.Errorf("first flag = %+v", got[0])
	}
	if got[1].Column() != "-f, --recipe FILE" || !got[1].Common || strings.Join(got[1].Words(), " ") != "-f --recipe" {
		t.Errorf("second flag = %+v", got[1])
	}
}

// A command's help names the other names it answers to; the completion refuses a shell it
// does not know; Nearest finds a misspelt name and no guess for a far one.
func TestHelpCompletionNearest(t *testing.T) {
	var b strings.Builder
	CommandHelp(&b, Command{Name: "pylock", Aliases: []string{"lock"}, Args: "-f RECIPE", Summary: "write the lock"})
	for _, want := range []string{"sglprov pylock: write the lock\n", "Usage: sglprov pylock -f RECIPE [flags]\n", "Also: sglprov lock (the same command)\n", "-h, --help"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, b.String())
		}
	}
	if err := Completion(io.Discard, "tcsh", Doc{}); err == nil || !strings.Contains(err.Error(), `unknown shell "tcsh"`) {
		t.Errorf("Completion(tcsh) = %v", err)
	}
	names := []string{"apply", "plan", "pylock"}
	for in, want := range map[string]string{"aply": "apply", "py": "pylock", "frobnicate": ""} {
		if got := Nearest(in, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
