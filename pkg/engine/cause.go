package engine

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// strongCauseRE and weakCauseRE find a line that says what went wrong: git's "fatal: ...",
// pip's "ERROR: ...", Python's "RuntimeError: ...", at the start of the line (strong), or a
// compiler's "x.cu(12): error: ..." anywhere in it (weak). makeRE is make's own summary of a failed
// rule ("make: *** [all] Error 1"), never the cause.
var (
	strongCauseRE = regexp.MustCompile(`^(?i:fatal|error|[a-z.]*error|[a-z.]*exception)\b`)
	weakCauseRE   = regexp.MustCompile(`(?i)(^|[\s:'"(])(fatal|error)\b`)
	makeRE        = regexp.MustCompile(`\*\*\* .*Error \d+`)
)

// exitRE ends the "doing what" part of a first line at the child's exit: what follows it on
// that line is the child's own first output line ("Cloning into '...'...").
var exitRE = regexp.MustCompile(`(exited with \d+|exit status \d+|signal: [a-z]+)`)

// Cause returns the one line that says why a step failed, for its row in a table: the
// error's first line when that is all it has; otherwise its "doing what" part (up to the
// child's exit status) followed by the first line that says error or fatal (one that
// starts so first), or, without one, by the last line of the child's output. "git exited with 128: Cloning into ..."
// followed by "fatal: ...: Could not resolve host: github.com" gives the fatal line.
func Cause(msg string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(msg), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "full log:") || strings.HasPrefix(l, "log:") {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return ""
	}
	first := lines[0]
	if len(lines) == 1 {
		return first
	}
	cause := ""
	for _, re := range []*regexp.Regexp{strongCauseRE, weakCauseRE} {
		for _, l := range lines[1:] {
			if cause == "" && re.MatchString(l) && !makeRE.MatchString(l) {
				cause = l
			}
		}
	}
	head := first
	if loc := exitRE.FindStringIndex(first); loc != nil {
		head = first[:loc[1]]
	} else if cause == "" {
		// A list of problems under a heading: the heading says it.
		return first
	}
	if cause == "" {
		cause = lines[len(lines)-1]
	}
	head = strings.TrimRight(strings.TrimSpace(head), ";: ")
	if head == cause {
		return cause
	}
	return head + ": " + cause
}

// networkRE finds the errors of a host that cannot reach a server: a name that does not
// resolve, a connection refused, reset or timed out, a network that is unreachable, a
// proxy that refused.
var networkRE = regexp.MustCompile(`(?i)could not resolve (host|proxy)|no such host|temporary failure in name resolution|connection (refused|reset|timed out)|network is unreachable|no route to host|i/o timeout|tls handshake timeout|failed to connect to|proxy ?connect|dial tcp`)

// NetworkHint returns what to do when msg, the error of a step of that kind, says the
// network failed ("" when it does not): the fixes sglprov has for that kind, a proxy in
// /etc/sglprov/env for every kind, HF_ENDPOINT there for a download from the hub (hub
// set; never for plain URLs, which no hub mirror serves), and a cache: block for the
// kinds the fleet cache serves (downloads, builds).
func NetworkHint(kind, msg string, hub bool) string {
	if !networkRE.MatchString(msg) {
		return ""
	}
	fixes := []string{"put a proxy in /etc/sglprov/env (HTTPS_PROXY=http://proxy:3128; the runcmd and the daemon's unit read it)"}
	if kind == "download" && hub {
		fixes = append(fixes, "set HF_ENDPOINT there for a hub mirror")
	}
	if kind == "download" || kind == "build" {
		fixes = append(fixes, "add a cache: block naming the fleet's registry")
	}
	last := len(fixes) - 1
	list := fixes[0]
	if last > 0 {
		list = strings.Join(fixes[:last], ", ") + ", or " + fixes[last]
	}
	return "this host could not reach the server: " + list + " (see docs/cloud-init.md)"
}

// stepsFailed is Apply's error when steps failed: every failed step on its own line with
// its error, then one last line that names them all, the ones cut short by Ctrl-C or
// SIGTERM as interrupted, not failed. It unwraps to the first failure, whose exit-code
// mark the run's exit code is.
type stepsFailed struct {
	names []string
	errs  []error
	// interrupted marks the steps that were cut short.
	interrupted []bool
}

func (e *stepsFailed) Error() string {
	var b strings.Builder
	for i, err := range e.errs {
		fmt.Fprintf(&b, "step %s: %s\n", e.names[i], strings.TrimSpace(exitcode.Message(err)))
	}
	var failed, cut []string
	for i, n := range e.names {
		if i < len(e.interrupted) && e.interrupted[i] {
			cut = append(cut, n)
		} else {
			failed = append(failed, n)
		}
	}
	var parts []string
	for _, g := range []struct {
		names []string
		verb  string
	}{{failed, "failed"}, {cut, "interrupted"}} {
		switch len(g.names) {
		case 0:
		case 1:
			parts = append(parts, fmt.Sprintf("step %s %s", g.names[0], g.verb))
		default:
			parts = append(parts, fmt.Sprintf("%d steps %s: %s", len(g.names), g.verb, strings.Join(g.names, ", ")))
		}
	}
	b.WriteString(strings.Join(parts, "; "))
	return b.String()
}

func (e *stepsFailed) Unwrap() error { return e.errs[0] }
