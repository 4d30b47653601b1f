package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// summary is the one line that says what sglprov is.
const summary = "sglprov provisions GPU hosts to serve LLMs with SGLang, and gates on correct answers."

// exitCodes is the exit-code contract, as help and the man page show it.
var exitCodes = []struct {
	Code    int
	Meaning string
}{
	{exitcode.ExitOK, "success (the gate passed, or there was nothing to do)"},
	{exitcode.ExitFailed, "a step failed"},
	{exitcode.ExitUsage, "bad usage or an invalid recipe"},
	{exitcode.ExitGate, "the smoke gate failed"},
	{exitcode.ExitHost, "the host does not meet the recipe's requirements, or NVML could not be loaded, or a download cannot fit, or (plan) the hub has no such model revision"},
	{exitcode.ExitLocked, "another sglprov run holds the lock"},
	{exitcode.ExitReboot, "reboot required (NVIDIA driver/library version mismatch)"},
	{ExitChanges, "plan --detailed-exitcode only: the plan has steps to run"},
	{ExitInterrupted, "interrupted (Ctrl-C, SIGINT)"},
}

// environment lists the variables sglprov reads, as help and the man page show them.
var environment = []struct{ Name, Meaning string }{
	{"SGLPROV_STATE_DIR", "the default of --state-dir (else " + DefaultStateDir + ")"},
	{"SGLPROV_GPU_FIXTURE", "a JSON file that describes the host's GPUs in place of NVML"},
	{"HF_TOKEN", "the Hugging Face hub token (never logged)"},
	{"HF_ENDPOINT", "the Hugging Face hub's URL"},
}

// usage writes the top-level help.
func usage(w io.Writer) {
	fmt.Fprintln(w, summary)
	fmt.Fprintln(w, "\nUsage: sglprov COMMAND [flags]")
	fmt.Fprintln(w, "\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nFlags:")
	fmt.Fprintln(w, "  -h, --help     show this help; 'sglprov COMMAND --help' shows a command's flags")
	fmt.Fprintln(w, "      --version  print the version and the commit it was built from")
	fmt.Fprintln(w, "\nExit codes:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range exitCodes {
		fmt.Fprintf(tw, "  %d\t%s\n", e.Code, e.Meaning)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nEnvironment:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range environment {
		fmt.Fprintf(tw, "  %s\t%s\n", e.Name, e.Meaning)
	}
	tw.Flush()
}

// writeCommandHelp writes a command's help: what it does, its synopsis and its flags.
func writeCommandHelp(w io.Writer, fs *flagSet) {
	c, _ := lookup(fs.cmd)
	fmt.Fprintf(w, "sglprov %s: %s\n\nUsage: %s\n", c.name, c.summary, c.synopsis())
	flags := fs.flags()
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	heading := ""
	for _, f := range flags {
		h := "Flags:"
		if f.Common {
			h = "Common flags:"
		}
		if h != heading {
			tw.Flush()
			fmt.Fprintf(w, "\n%s\n", h)
			heading = h
		}
		fmt.Fprintf(tw, "  %s\t%s\n", flagColumn(f), flagUsage(f))
	}
	if heading == "" {
		fmt.Fprintln(w, "\nFlags:")
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "-h, --help", "show this help")
	tw.Flush()
}

// flagColumn is the left column of a flag's help line: "-f, --recipe FILE".
func flagColumn(f flagInfo) string {
	s := f.Names()
	if f.ValueName != "" {
		s += " " + f.ValueName
	}
	return s
}

// flagUsage is a flag's usage text with its default, shown once.
func flagUsage(f flagInfo) string {
	if f.Default != "" {
		return f.Usage + " (default " + f.Default + ")"
	}
	return f.Usage
}

// describeAll returns each command with its flags, as the command defines them: each
// command is run with --help and a describe hook in place of printing.
func describeAll(stdio IO) []describedCommand {
	var out []describedCommand
	for _, c := range commands() {
		d := describedCommand{command: c}
		quiet := IO{Stdin: stdio.Stdin, Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
		quiet.describe = func(fs *flagSet) { d.flags = fs.flags() }
		_ = c.run(context.Background(), quiet, []string{"--help"})
		out = append(out, d)
	}
	return out
}

// describedCommand is a command with its flags.
type describedCommand struct {
	command
	flags []flagInfo
}

// runHelp is `sglprov help [COMMAND]`.
func runHelp(ctx context.Context, stdio IO, args []string) error {
	fs := newFlags("help", stdio)
	if err := fs.Parse(args); err != nil {
		return fs.flagError(err)
	}
	switch fs.NArg() {
	case 0:
		usage(stdio.Stdout)
		return nil
	case 1:
	default:
		return usageError("help", fmt.Sprintf("give one command, not %q", strings.Join(fs.Args(), " ")))
	}
	c, ok := lookup(fs.Arg(0))
	if !ok {
		return unknownCommand(fs.Arg(0))
	}
	return c.run(ctx, stdio, []string{"--help"})
}

// unknownCommand is the usage error for a command sglprov does not have, with the nearest
// one when it is close.
func unknownCommand(name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if s := nearest(name); s != "" {
		msg += fmt.Sprintf("; did you mean %s?", s)
	}
	return &exitcode.Error{Msg: msg + "\nRun 'sglprov --help' for the list of commands.", Kind: exitcode.ErrUsage}
}

// nearest returns the command whose name is closest to name (edit distance at most 2, or
// a prefix of at least two letters), or "".
func nearest(name string) string {
	best, bestD := "", 3
	for _, c := range commands() {
		if len(name) >= 2 && strings.HasPrefix(c.name, name) {
			return c.name
		}
		// A short name ("gc") is near anything short: the guess must keep part of it.
		if d := editDistance(strings.ToLower(name), c.name); d < bestD && d < len(c.name) {
			best, bestD = c.name, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein (optimal string alignment) distance of a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
