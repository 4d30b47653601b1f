//go:build linux

package fetch

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sglprov/sglprov/pkg/console"
)

// openPTY opens a pseudo-terminal of 160 x 40 whose line discipline echoes control
// characters as "^C" (ECHOCTL), as a shell's terminal does. The test reads what the
// terminal shows from master and draws on slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	fail := t.Fatalf
	if os.Geteuid() != 0 {
		fail = t.Skipf // a sandbox without /dev/ptmx for users; root always has one
	}
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		fail("opening a pty: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		fail("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		fail("naming the pty: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		fail("opening the pty's terminal: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 160}); err != nil {
		t.Fatalf("sizing the pty: %v", err)
	}
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatalf("reading the pty's modes: %v", err)
	}
	// ^C echoed as a shell's terminal does; no signal (the test owns no session).
	tio.Lflag |= unix.ICANON | unix.ECHO | unix.ECHOCTL
	tio.Lflag &^= unix.ISIG
	if err := unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatalf("setting the pty's modes: %v", err)
	}
	return m, s
}

// TestTerminalCtrlCEchoKeepsLinesWhole: Ctrl-C on a terminal echoes "^C" below the bars,
// two columns in. The next redraw must start from the left edge: before, it went up from
// column 2, so the first bar kept "mo" and the line logged next read
// "mo22:31:31 WARN  interrupted ...", there for good.
func TestTerminalCtrlCEchoKeepsLinesWhole(t *testing.T) {
	master, slave := openPTY(t)
	var shown syncBuffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&shown, master)
	}()

	con := console.New(slave)
	r := NewTerminalReporter(con)
	const file = "model-00001-of-00003.safetensors"
	const mib = 1 << 20
	r.Start(file, 10*mib, 0)
	r.Start("model-00002-of-00003.safetensors", 10*mib, 0)
	r.Add(file, 3*mib)
	time.Sleep(500 * time.Millisecond) // drawn a few times

	if _, err := master.Write([]byte{0x03}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(shown.String(), "^C") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !strings.Contains(shown.String(), "^C") {
		t.Fatalf("the pty did not echo ^C:\n%q", shown.String())
	}
	const logged = "22:31:31 WARN  interrupted step=chatter"
	fmt.Fprintln(con, logged)
	time.Sleep(500 * time.Millisecond) // drawn again, the line above the bars
	r.Done(file, context.Canceled)
	r.Done("model-00002-of-00003.safetensors", context.Canceled)
	r.Close()
	fmt.Fprintln(con, "22:31:32 INFO  after the bars")

	time.Sleep(100 * time.Millisecond)
	_ = slave.Close()
	<-read
	lines := screen(shown.String())
	text := strings.Join(lines, "\n")
	if i := lineWith(lines, logged); i < 0 || !strings.HasPrefix(lines[i], logged) {
		t.Errorf("the line logged after Ctrl-C does not start at the left edge:\n%s", text)
	}
	if i := lineWith(lines, file, "interrupted"); i < 0 || !strings.HasPrefix(lines[i], file) {
		t.Errorf("the interrupted bar does not start with its file's name:\n%s", text)
	}
	if i := lineWith(lines, "total", "interrupted"); i < 0 || !strings.HasPrefix(lines[i], "total") {
		t.Errorf("the interrupted total does not start with \"total\":\n%s", text)
	}
	if strings.Contains(text, "^C") {
		t.Errorf("the ^C echo is left inside the display:\n%s", text)
	}
}
