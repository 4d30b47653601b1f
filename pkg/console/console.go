// Package console is the terminal a run shares between its logs and a progress display
// (download bars). While a display is up, whole lines written to the console are handed
// to the display, which prints them above itself, where they stay; without one they go
// straight to the terminal.
package console

import (
	"bytes"
	"io"
	"os"
	"sync"
)

// Console is a writer shared by concurrent steps. Its zero value is not usable; call New.
type Console struct {
	mu      sync.Mutex
	out     io.Writer
	above   io.Writer // the display's writer while one is up
	partial []byte    // the start of a line not yet ended, while a display is up
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
	prev := c.above
	c.above = above
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.above = prev
			if prev == nil && len(c.partial) > 0 {
				_, _ = c.out.Write(c.partial)
				c.partial = nil
			}
		})
	}
}

// Write implements io.Writer.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.above == nil {
		return c.out.Write(p)
	}
	if len(p) > 0 && p[0] == '\r' && bytes.IndexByte(p, '\n') < 0 {
		return len(p), nil // a status line redrawn in place: the display owns the bottom
	}
	buf := append(c.partial, p...)
	c.partial = nil
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
