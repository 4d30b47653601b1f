// Package console is the terminal a run shares between its logs and a progress display
// (download bars). While a display is up, whole lines written to the console are handed
// to the display, which prints them above itself, where they stay; without one they go
// straight to the terminal. Live status lines (a readiness wait, a build's progress)
// each keep a line of their own at the bottom, under the lines logged meanwhile.
package console

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/charmbracelet/x/term"
)

// Console is a writer shared by concurrent steps. Its zero value is not usable; call New.
type Console struct {
	mu      sync.Mutex
	out     io.Writer
	above   io.Writer     // the display's writer while one is up
	partial []byte        // the start of a line not yet ended, while lines are held back
	status  []*statusLine // the live status lines, oldest first
	drawn   int           // how many of them are on the screen, the cursor at the last one's end
}

// New returns a console writing to out (the process's stderr).
func New(out io.Writer) *Console { return &Console{out: out} }

// Fd returns the file descriptor of the terminal underneath (for size and colour checks),
// or ^uintptr(0) when out is not a file.
func (c *Console) Fd() uintptr {
	if f, ok := c.out.(*os.File); ok {
		return f.Fd()
	}
	return ^uintptr(0)
}

// Raw returns the writer underneath, for a display to draw on.
func (c *Console) Raw() io.Writer { return c.out }

// Divert sends whole lines to above (a display that prints them above itself) until the
// returned restore is called. A line being redrawn in place ("\r..." without a newline:
// another status line) is dropped while the display is up: the display owns the bottom of
// the screen. Displays nest: restore brings back the one before.
func (c *Console) Divert(above io.Writer) (restore func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eraseLocked() // the display draws where the status lines were; they come back after it
	prev := c.above
	c.above = above
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.above = prev
			if prev == nil && len(c.partial) > 0 && len(c.status) == 0 {
				_, _ = c.out.Write(c.partial)
				c.partial = nil
			}
			c.drawLocked()
		})
	}
}

// StatusLine returns a writer for one live status line, redrawn in place as the
// "\r\x1b[K" + text writes it gets say: the text after the last carriage return (and
// erase-line) is the line's new text, and an empty one takes the line away. Each status
// line keeps a row of its own at the bottom of the terminal, below the lines logged while
// it is up; while a display (download bars) is up, they wait under it.
func (c *Console) StatusLine() io.Writer { return &statusLine{c: c} }

// StatusLineOf returns a status line of w when w is a Console, else w itself (a writer
// that takes "\r\x1b[K" + text redraws as they are).
func StatusLineOf(w io.Writer) io.Writer {
	if c, ok := w.(*Console); ok {
		return c.StatusLine()
	}
	return w
}

type statusLine struct {
	c    *Console
	text string
}

// Write implements io.Writer.
func (l *statusLine) Write(p []byte) (int, error) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	text := string(p)
	if i := strings.LastIndexAny(text, "\r\n"); i >= 0 {
		text = text[i+1:]
	}
	text = strings.TrimPrefix(text, "\x1b[K")
	c.eraseLocked()
	l.text = text
	at := -1
	for i, s := range c.status {
		if s == l {
			at = i
		}
	}
	switch {
	case text == "" && at >= 0:
		c.status = append(c.status[:at], c.status[at+1:]...)
	case text != "" && at < 0:
		c.status = append(c.status, l)
	}
	c.drawLocked()
	return len(p), nil
}

// eraseLocked takes the status lines off the screen, leaving the cursor where the first
// one began.
func (c *Console) eraseLocked() {
	if c.drawn == 0 {
		return
	}
	up := ""
	if c.drawn > 1 {
		up = "\x1b[" + itoa(c.drawn-1) + "A"
	}
	_, _ = io.WriteString(c.out, "\r"+up+"\x1b[J")
	c.drawn = 0
}

// drawLocked draws the status lines at the cursor (the start of a line), each cut to the
// terminal's width so that none wraps; not while a display is up.
func (c *Console) drawLocked() {
	if c.above != nil || c.drawn > 0 || len(c.status) == 0 {
		return
	}
	width := 0
	if fd := c.Fd(); fd != ^uintptr(0) {
		if w, _, err := term.GetSize(fd); err == nil {
			width = w
		}
	}
	var b strings.Builder
	for i, s := range c.status {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(cut(s.text, width-1))
	}
	_, _ = io.WriteString(c.out, b.String())
	c.drawn = len(c.status)
}

// cut shortens s to n runes, marking the cut with "…" (n < 1: no limit).
func cut(s string, n int) string {
	r := []rune(s)
	if n < 1 || len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// Write implements io.Writer.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.above == nil && len(c.status) == 0 && len(c.partial) == 0 {
		return c.out.Write(p)
	}
	if len(p) > 0 && p[0] == '\r' && bytes.IndexByte(p, '\n') < 0 {
		return len(p), nil // a status line redrawn in place: the display or StatusLine owns the bottom
	}
	buf := append(c.partial, p...)
	c.partial = nil
	if c.above == nil {
		// Whole lines go above the status lines; a line's start waits for its end.
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			c.eraseLocked()
			_, _ = c.out.Write(buf[:i+1])
			buf = buf[i+1:]
			c.drawLocked()
		}
		if len(buf) > 0 {
			if len(c.status) == 0 {
				_, _ = c.out.Write(buf)
			} else {
				c.partial = append([]byte(nil), buf...)
			}
		}
		return len(p), nil
	}
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		line := buf[:i+1]
		buf = buf[i+1:]
		if j := bytes.LastIndexByte(line, '\r'); j >= 0 && j < len(line)-1 {
			line = line[j+1:] // what a terminal would show of it
		}
		if _, err := c.above.Write(line); err != nil {
			// The display has ended: the line goes to the terminal itself.
			_, _ = c.out.Write(line)
		}
	}
	if len(buf) > 0 && buf[0] != '\r' {
		c.partial = append([]byte(nil), buf...)
	}
	return len(p), nil
}
