package clidoc

import (
	"fmt"
	"io"
	"strings"
)

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

// Man writes the man page sglprov(1) of version.
func Man(w io.Writer, d Doc, version string) error {
	cmds := d.Commands
	var b strings.Builder
	fmt.Fprintf(&b, ".TH SGLPROV 1 \"\" %q \"User Commands\"\n", "sglprov "+version)
	b.WriteString(".SH NAME\nsglprov \\- provision GPU hosts to serve LLMs with SGLang, gated on correct answers\n")
	b.WriteString(".SH SYNOPSIS\n.B sglprov\n.I COMMAND\n[\\fIflags\\fR]\n")
	b.WriteString(".SH DESCRIPTION\n")
	b.WriteString(roff(d.Summary) + "\n")
	b.WriteString(".PP\n" + roff("It reads a YAML recipe: it checks the GPUs, fetches and patches SGLang, builds its kernels for the GPU at hand, downloads the weights, installs the service, and calls the host ready only when real chat completions come back correct. A re-run does only what changed.") + "\n")
	b.WriteString(".PP\n" + roff("Every flag takes one dash or two (-json, --json); a flag's value follows it (--state-dir DIR or --state-dir=DIR).") + "\n")
	b.WriteString(".SH COMMANDS\n")
	// The common flags are the same for every command that takes them: listed once.
	var common []Flag
	var takers []string
	for _, c := range cmds {
		fmt.Fprintf(&b, ".SS \"%s\"\n%s\n", roff(c.Synopsis()), roff(c.Summary))
		var own, shared []Flag
		for _, f := range c.Flags {
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
			takers = append(takers, c.Name)
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
	for _, e := range d.ExitCodes {
		fmt.Fprintf(&b, ".TP\n.B %d\n%s\n", e.Code, roff(e.Meaning))
	}
	b.WriteString(".SH ENVIRONMENT\n")
	for _, e := range d.Environment {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", e.Name, roff(e.Meaning))
	}
	b.WriteString(".SH DAEMON\n")
	b.WriteString(roff("sglprov daemon -f RECIPE [-f RECIPE...] is the node's one long-running process (its unit and cloud-init: docs/cloud-init.md). It applies each recipe, then every --interval reads the driver facts (a driver change re-applies what depends on it; a library mismatch is exit 6's reboot) and asks each served model the canary case. A canary that keeps failing (--failures-before-restart) climbs the remediation ladder: restart the server (--max-restarts), the whole gate, the next profile, the previous generation, then unhealthy, running the recipe's on_unhealthy and on_healthy hooks on each transition. It serves Prometheus metrics on --metrics-addr (127.0.0.1:9477) with /healthz (200 only while every recipe serves correct answers; 503 and the reason otherwise) and /readyz (200 once the first gate passed), and writes them to --textfile. It holds the state dir's lock for its whole life: an apply beside it is refused (exit 5) naming its pid; SIGHUP re-reads the recipes and applies what changed; SIGINT or SIGTERM stops it cleanly. It refuses --root (exit 2).") + "\n")
	b.WriteString(".SH FILES\n")
	for _, f := range []struct{ path, meaning string }{
		{d.StateDir + "/state.json", "per recipe and step: fingerprint, result, start and duration of the last run (written atomically)"},
		{d.StateDir + "/runs/TIME/", "one folder per run, the newest 50 kept: report.json (sglprov schema report) and one log per step that ran"},
		{d.StateDir + "/lock", "held by the running apply or the daemon, the holder's pid inside; plan and status take it shared"},
		{d.StateDir + "/generations/RECIPE.json", "a recipe's generations: which serves, which passed, what each was built from (sglprov status lists them; sglprov rollback goes back to one)"},
		{d.StateDir + "/units/", "the units the exec manager runs, and the last one that passed (UNIT.last-known-good)"},
		{d.StateDir + "/cache-uploads/", "uploads to the fleet cache not finished yet"},
		{"/var/lib/sglprov/gpu-claims/", "the GPUs each recipe's server runs on, node-wide whatever the state dir (SGLPROV_GPU_CLAIMS_DIR moves it)"},
		{"/opt/sglprov/generations/RECIPE/", "a recipe's generations (generations.dir), and current, the link to the one that serves"},
		{"/etc/systemd/system/UNIT", "the units sglprov renders, each marked # Managed by sglprov, with the recipe's name"},
		{"/etc/sglprov/env", "the environment cloud-init's runcmd and the daemon's unit read (a proxy, HF_ENDPOINT)"},
	} {
		fmt.Fprintf(&b, ".TP\n.I %s\n%s\n", roff(f.path), roff(f.meaning))
	}
	b.WriteString(".SH \"SEE ALSO\"\n.BR systemctl (1),\n.BR journalctl (1),\n.BR nvidia\\-smi (1)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeManFlag writes one flag as a tagged paragraph.
func writeManFlag(b *strings.Builder, f Flag) {
	b.WriteString(".TP\n")
	var names []string
	for _, n := range f.Words() {
		names = append(names, `\fB`+roff(n)+`\fR`)
	}
	line := strings.Join(names, ", ")
	if f.ValueName != "" {
		line += ` \fI` + roff(f.ValueName) + `\fR`
	}
	b.WriteString(line + "\n" + roff(f.Text()) + "\n")
}
