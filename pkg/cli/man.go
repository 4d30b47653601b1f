package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sglprov/sglprov/pkg/buildinfo"
)

// runMan is `sglprov man`: the man page sglprov(1), made from the same commands, flags and
// tables as the help.
func runMan(ctx context.Context, stdio IO, args []string) error {
	fs := newFlags("man", stdio)
	if err := parse(fs, args); err != nil {
		return err
	}
	return writeMan(stdio.Stdout, describeAll(stdio), buildinfo.Read().Version)
}

// roff escapes text for a roff line: backslashes, and a leading '.' or '\” that would
// start a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func writeMan(w io.Writer, cmds []describedCommand, version string) error {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH SGLPROV 1 \"\" %q \"User Commands\"\n", "sglprov "+version)
	b.WriteString(".SH NAME\nsglprov \\- provision GPU hosts to serve LLMs with SGLang, gated on correct answers\n")
	b.WriteString(".SH SYNOPSIS\n.B sglprov\n.I COMMAND\n[\\fIflags\\fR]\n")
	b.WriteString(".SH DESCRIPTION\n")
	b.WriteString(roff(summary) + "\n")
	b.WriteString(".PP\n" + roff("It reads a YAML recipe: it checks the GPUs, fetches and patches SGLang, builds its kernels for the GPU at hand, downloads the weights, installs the service, and calls the host ready only when real chat completions come back correct. A re-run does only what changed.") + "\n")
	b.WriteString(".PP\n" + roff("Every flag takes one dash or two (-json, --json); a flag's value follows it (--state-dir DIR or --state-dir=DIR).") + "\n")
	b.WriteString(".SH COMMANDS\n")
	// The common flags are the same for every command that takes them: listed once.
	var common []flagInfo
	var takers []string
	for _, c := range cmds {
		fmt.Fprintf(&b, ".SS \"%s\"\n%s\n", roff(c.synopsis()), roff(c.summary))
		var own, shared []flagInfo
		for _, f := range c.flags {
			if f.Common {
				shared = append(shared, f)
			} else {
				own = append(own, f)
			}
		}
		for _, f := range own {
			writeManFlag(&b, f)
		}
		if len(shared) > 0 {
			if len(own) == 0 {
				b.WriteString(".PP\nIts flags are the common flags (see \\fBCOMMON FLAGS\\fR).\n")
			} else {
				b.WriteString(".PP\nAlso the common flags (see \\fBCOMMON FLAGS\\fR).\n")
			}
			takers = append(takers, c.name)
			if common == nil {
				common = shared
			}
		}
	}
	if len(common) > 0 {
		b.WriteString(".SH \"COMMON FLAGS\"\n")
		b.WriteString(roff("Taken by "+strings.Join(takers, ", ")+".") + "\n")
		for _, f := range common {
			writeManFlag(&b, f)
		}
	}
	b.WriteString(".SH \"EXIT STATUS\"\n")
	for _, e := range exitCodes {
		fmt.Fprintf(&b, ".TP\n.B %d\n%s\n", e.Code, roff(e.Meaning))
	}
	b.WriteString(".SH ENVIRONMENT\n")
	for _, e := range environment {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", e.Name, roff(e.Meaning))
	}
	b.WriteString(".SH FILES\n")
	fmt.Fprintf(&b, ".TP\n.I %s/state.json\n%s\n", roff(DefaultStateDir), roff("per step: fingerprint, result, start and duration of the last run"))
	fmt.Fprintf(&b, ".TP\n.I %s/runs/\n%s\n", roff(DefaultStateDir), roff("one folder per run: report.json and one log per step that ran"))
	fmt.Fprintf(&b, ".TP\n.I %s/lock\n%s\n", roff(DefaultStateDir), roff("held by the running apply; the holder's pid inside"))
	b.WriteString(".SH \"SEE ALSO\"\n.BR systemctl (1),\n.BR journalctl (1),\n.BR nvidia\\-smi (1)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeManFlag writes one flag as a tagged paragraph.
func writeManFlag(b *strings.Builder, f flagInfo) {
	b.WriteString(".TP\n")
	var names []string
	for _, n := range flagWords(f) {
		names = append(names, `\fB`+roff(n)+`\fR`)
	}
	line := strings.Join(names, ", ")
	if f.ValueName != "" {
		line += ` \fI` + roff(f.ValueName) + `\fR`
	}
	b.WriteString(line + "\n" + roff(flagUsage(f)) + "\n")
}
