package console

import (
	"bytes"
	"errors"
	"testing"
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
