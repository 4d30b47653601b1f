// Package clidoc writes sglprov's documentation from its command table: the top-level
// help, a command's help, the man page sglprov(1) and the shell completion scripts. The
// command layer describes its commands and flags (Doc); this package only lays them out.
package clidoc

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Doc is what the help, the man page and the completion scripts are made of.
type Doc struct {
	// Summary is the one line that says what sglprov is.
	Summary string
	// Commands are the commands, in the order help lists them.
	Commands []Command
	// ExitCodes is the exit-code contract; Environment the variables sglprov reads.
	ExitCodes   []ExitCode
	Environment []Variable
	// StateDir is the default state dir, as the man page's FILES names it.
	StateDir string
}

// ExitCode is one exit code of the contract and what it means.
type ExitCode struct {
	Code    int
	Meaning string
}

// Variable is one environment variable sglprov reads and what it sets.
type Variable struct{ Name, Meaning string }

// Command is one command as the documentation shows it.
type Command struct {
	// Name is the command's name; Aliases other names it answers to; Args the arguments
	// its synopsis shows; Summary the one line that says what it does.
	Name    string
	Aliases []string
	Args    string
	Summary string
	// Flags are its flags, as its flag set defines them (Describe).
	Flags []Flag
	// Words are what it takes after it besides flags (completion offers them).
	Words []string
}

// Synopsis is the command's usage line.
func (c Command) Synopsis() string {
	s := "sglprov " + c.Name
	if c.Args != "" {
		s += " " + c.Args
	}
	return s + " [flags]"
}

// Flag is one flag as help shows it: its names, value name, usage and default.
type Flag struct {
	Long, Short string
	ValueName   string
	Usage       string
	Default     string
	Common      bool
	Bool        bool
}

// Names returns "-f, --recipe" or "    --json".
func (f Flag) Names() string {
	if f.Short != "" && f.Long != "" {
		return "-" + f.Short + ", --" + f.Long
	}
	if f.Long == "" {
		return "-" + f.Short
	}
	return "    --" + f.Long
}

// Column is the left column of a flag's help line: "-f, --recipe FILE".
func (f Flag) Column() string {
	s := f.Names()
	if f.ValueName != "" {
		s += " " + f.ValueName
	}
	return s
}

// Text is a flag's usage text with its default, shown once.
func (f Flag) Text() string {
	if f.Default != "" {
		return f.Usage + " (default " + f.Default + ")"
	}
	return f.Usage
}

// Words returns a flag's spellings: "-f --recipe".
func (f Flag) Words() []string {
	var out []string
	if f.Short != "" {
		out = append(out, "-"+f.Short)
	}
	if f.Long != "" {
		out = append(out, "--"+f.Long)
	}
	return out
}

// Usage writes the top-level help.
func Usage(w io.Writer, d Doc) {
	fmt.Fprintln(w, d.Summary)
	fmt.Fprintln(w, "\nUsage: sglprov COMMAND [flags]")
	fmt.Fprintln(w, "\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range d.Commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nFlags:")
	fmt.Fprintln(w, "  -h, --help     show this help; 'sglprov COMMAND --help' shows a command's flags")
	fmt.Fprintln(w, "      --version  print the version and the commit it was built from")
	fmt.Fprintln(w, "\nExit codes:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range d.ExitCodes {
		fmt.Fprintf(tw, "  %d\t%s\n", e.Code, e.Meaning)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nEnvironment:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range d.Environment {
		fmt.Fprintf(tw, "  %s\t%s\n", e.Name, e.Meaning)
	}
	tw.Flush()
}

// CommandHelp writes a command's help: what it does, its synopsis, the other names it
// answers to and its flags.
func CommandHelp(w io.Writer, c Command) {
	fmt.Fprintf(w, "sglprov %s: %s\n\nUsage: %s\n", c.Name, c.Summary, c.Synopsis())
	if len(c.Aliases) > 0 {
		fmt.Fprintf(w, "\nAlso: sglprov %s (the same command)\n", strings.Join(c.Aliases, ", sglprov "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	heading := ""
	for _, f := range c.Flags {
		h := "Flags:"
		if f.Common {
			h = "Common flags:"
		}
		if h != heading {
			tw.Flush()
			fmt.Fprintf(w, "\n%s\n", h)
			heading = h
		}
		fmt.Fprintf(tw, "  %s\t%s\n", f.Column(), f.Text())
	}
	if heading == "" {
		fmt.Fprintln(w, "\nFlags:")
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "-h, --help", "show this help")
	tw.Flush()
}

// Nearest returns the name of names closest to name (edit distance at most 2, or a
// prefix of at least two letters), or "".
func Nearest(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if len(name) >= 2 && strings.HasPrefix(n, name) {
			return n
		}
		// A short name ("gc") is near anything short: the guess must keep part of it.
		if d := EditDistance(strings.ToLower(name), n); d < bestD && d < len(n) {
			best, bestD = n, d
		}
	}
	return best
}

// EditDistance is the Damerau-Levenshtein (optimal string alignment) distance of a and b.
func EditDistance(a, b string) int {
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
