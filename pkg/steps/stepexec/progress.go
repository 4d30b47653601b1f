package stepexec

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/console"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/logval"
)

// progressLine matches the lines by which build tools report progress: Make's
// `[ 42%] Building CUDA object ...` and Ninja's `[123/456] Building CUDA object ...`.
var progressLine = regexp.MustCompile(`^\[\s*(\d+%|\d+/\d+)\]\s+\S`)

// ansiEscape matches terminal escape sequences (colours) that tools print even to a pipe.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// compileSource and compileOutput find the file a verbose compile command line works on
// (CMAKE_VERBOSE_MAKEFILE makes Ninja print whole nvcc command lines).
var (
	compileSource = regexp.MustCompile(`\s-c\s+(\S+)`)
	compileOutput = regexp.MustCompile(`\s-o\s+(\S+)`)
)

// maxTarget is the length beyond which a progress line is shortened to its counter and
// the file it compiles.
const maxTarget = 160

// target returns the progress line as the status shows it: as it is, or for a long
// command line, the counter and the source (or output) file.
func target(line string) string {
	if len(line) <= maxTarget {
		return line
	}
	counter := progressLine.FindString(line)
	counter = strings.TrimSpace(counter[:strings.IndexByte(counter, ']')+1])
	for _, re := range []*regexp.Regexp{compileSource, compileOutput} {
		if m := re.FindStringSubmatch(line); m != nil {
			return counter + " " + m[1]
		}
	}
	return line[:maxTarget] + "…"
}

// maxLine bounds one line kept for the tail and the status; longer ones are cut.
const maxLine = 4096

// monitor follows a build's output: line count, last progress line and the last lines.
type monitor struct {
	start time.Time

	mu      sync.Mutex
	lines   int
	last    string
	ring    []string
	next    int
	partial []byte
	afterCR bool
}

func newMonitor(start time.Time, keep int) *monitor {
	return &monitor{start: start, ring: make([]string, 0, keep)}
}

// feed splits b into lines at "\n" and "\r" (tools that redraw a line in place); the
// "\n" of a "\r\n" ends no second line.
func (m *monitor) feed(b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(b) > 0 {
		i := indexEOL(b)
		if i < 0 {
			m.appendPartial(b)
			m.afterCR = false
			return
		}
		m.appendPartial(b[:i])
		if !(b[i] == '\n' && i == 0 && m.afterCR && len(m.partial) == 0) {
			m.addLocked(string(m.partial))
		}
		m.afterCR = b[i] == '\r'
		m.partial = m.partial[:0]
		b = b[i+1:]
	}
}

func (m *monitor) appendPartial(b []byte) {
	if room := maxLine - len(m.partial); room > 0 {
		m.partial = append(m.partial, b[:min(len(b), room)]...)
	}
}

func indexEOL(b []byte) int {
	for i, c := range b {
		if c == '\n' || c == '\r' {
			return i
		}
	}
	return -1
}

// flush ends a last line without a newline.
func (m *monitor) flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.partial) > 0 {
		m.addLocked(string(m.partial))
		m.partial = m.partial[:0]
	}
}

// addLocked records one line.
func (m *monitor) addLocked(line string) {
	line = strings.ToValidUTF8(line, "\uFFFD")
	if strings.IndexByte(line, 0x1b) >= 0 {
		line = ansiEscape.ReplaceAllString(line, "")
	}
	m.lines++
	if progressLine.MatchString(line) {
		m.last = target(strings.TrimSpace(line))
	}
	if len(m.ring) < cap(m.ring) {
		m.ring = append(m.ring, line)
		return
	}
	if cap(m.ring) == 0 {
		return
	}
	m.ring[m.next] = line
	m.next = (m.next + 1) % cap(m.ring)
}

// tail returns the last lines, oldest first, without trailing blank ones.
func (m *monitor) tail() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.ring))
	out = append(out, m.ring[m.next:]...)
	out = append(out, m.ring[:m.next]...)
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	return out
}

// snapshot returns the elapsed time, line count and last progress line.
func (m *monitor) snapshot(now time.Time) (time.Duration, int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return now.Sub(m.start).Truncate(time.Second), m.lines, m.last
}

// status is the one-line summary shown on the console.
func (m *monitor) status(name, verb string, now time.Time) string {
	elapsed, lines, last := m.snapshot(now)
	if verb == "" {
		verb = "building"
	}
	s := fmt.Sprintf("%s: %s %s, %d lines", name, verb, elapsed, lines)
	if last != "" {
		s += ", " + last
	}
	return s
}

// startProgress reports progress until the returned function is called: on a terminal a
// status line redrawn in place every StatusEvery, on a pipe a log line every LogEvery.
func (s *Runner) startProgress(env *engine.Env, mon *monitor) (stop func()) {
	if env.Console == nil {
		return func() {}
	}
	every := s.LogEvery
	if env.IsTerminal {
		every = s.StatusEvery
	}
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	width := terminalWidth(env.Console)
	line := console.StatusLineOf(env.Console) // a row of its own among other status lines
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				if env.IsTerminal {
					fmt.Fprint(line, "\r\x1b[K")
				}
				return
			case now := <-t.C:
				if env.IsTerminal {
					fmt.Fprint(line, "\r\x1b[K"+truncate(mon.status(s.Name, s.Verb, now), width-1))
					continue
				}
				elapsed, lines, last := mon.snapshot(now)
				if env.Log != nil {
					env.Log.Info("still running", "seconds", logval.Seconds(elapsed), "lines", lines, "last", last)
				} else {
					fmt.Fprintln(env.Console, mon.status(s.Name, s.Verb, now))
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// terminalWidth returns the width of the terminal w writes to, 80 when unknown.
func terminalWidth(w io.Writer) int {
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 80
}

// truncate cuts s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if n <= 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
