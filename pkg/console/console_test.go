package console

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/console/termtest"
)

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("display ended") }

func TestDivert(t *testing.T) {
	var out, above bytes.Buffer
	c := New(&out)
	c.Write([]byte("before\n"))
	restore := c.Divert(&above)
	c.Write([]byte("one line in "))
	c.Write([]byte("two writes\nand a start"))
	c.Write([]byte("\r\x1b[Ka status line redrawn"))
	c.Write([]byte(" ended\n"))
	restore()
	c.Write([]byte("after\n"))
	if got, want := out.String(), "before\nafter\n"; got != want {
		t.Errorf("terminal got %q, want %q", got, want)
	}
	if got, want := above.String(), "one line in two writes\nand a start ended\n"; got != want {
		t.Errorf("display got %q, want %q", got, want)
	}

	// A display that has ended: lines go to the terminal.
	out.Reset()
	restore = c.Divert(failing{})
	c.Write([]byte("late line\n"))
	restore()
	if out.String() != "late line\n" {
		t.Errorf("a line for an ended display went to %q", out.String())
	}
}

// TestStatusLinesKeepTheirRows: two live status lines (a build's progress and a readiness
// wait) each keep a row at the bottom, and lines logged meanwhile go above them whole.
// Before, both redrew the same row in turn, and a logged line was written after whatever
// status text was up ("...not ready after 9s22:33:26 INFO  done").
func TestStatusLinesKeepTheirRows(t *testing.T) {
	var out bytes.Buffer
	c := New(&out)
	build, wait := c.StatusLine(), c.StatusLine()
	c.Write([]byte("22:33:18 INFO  running step=chatter\n"))
	fmt.Fprint(build, "\r\x1b[Kchatter: building 1s, 1 lines")
	fmt.Fprint(wait, "\r\x1b[Kwaiting for http://127.0.0.1:1: not ready after 1s")
	fmt.Fprint(build, "\r\x1b[Kchatter: building 2s, 2 lines")
	c.Write([]byte("22:33:20 INFO  done "))
	c.Write([]byte("step=weights\n"))
	fmt.Fprint(wait, "\r\x1b[Kwaiting for http://127.0.0.1:1: not ready after 2s")
	got := termtest.Screen(out.String())
	want := []string{
		"22:33:18 INFO  running step=chatter",
		"22:33:20 INFO  done step=weights",
		"chatter: building 2s, 2 lines",
		"waiting for http://127.0.0.1:1: not ready after 2s",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The build ends: its row goes, the wait's stays; a display hides the wait until it ends.
	fmt.Fprint(build, "\r\x1b[K")
	c.Write([]byte("22:33:26 INFO  done step=chatter\n"))
	var bars bytes.Buffer
	restore := c.Divert(&bars)
	fmt.Fprint(wait, "\r\x1b[Kwaiting for http://127.0.0.1:1: not ready after 3s")
	c.Write([]byte("22:33:27 INFO  downloading\n"))
	restore()
	fmt.Fprint(wait, "\r\x1b[K")
	c.Write([]byte("22:33:31 INFO  smoke gate passed\n"))
	got = termtest.Screen(out.String())
	want = []string{
		"22:33:18 INFO  running step=chatter",
		"22:33:20 INFO  done step=weights",
		"22:33:26 INFO  done step=chatter",
		"22:33:31 INFO  smoke gate passed",
		"",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if bars.String() != "22:33:27 INFO  downloading\n" {
		t.Errorf("the display got %q", bars.String())
	}
}
