package fetch

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/console"
	"github.com/sglprov/sglprov/pkg/console/termtest"
)

// syncBuffer is a bytes.Buffer safe for mpb's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// screen returns the lines a terminal shows after out.
func screen(out string) []string { return termtest.Screen(out) }

func lineWith(lines []string, parts ...string) int {
	for i, l := range lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return i
		}
	}
	return -1
}

// TestTerminalSpeedIsBytesWritten: the speed shown is the bytes written over the time
// they took (a moving average), not an average of per-call rates.
func TestTerminalSpeedIsBytesWritten(t *testing.T) {
	var buf syncBuffer
	r := newTerminalReporter(&buf, true)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := t0
	r.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	const mib = 1 << 20
	r.Start("a.safetensors", 1000*mib, 0)
	for i := 1; i <= 200; i++ { // 257.8 MiB in 648 ms, in many small writes
		mu.Lock()
		clock = t0.Add(time.Duration(i) * 648 * time.Millisecond / 200)
		mu.Unlock()
		r.Add("a.safetensors", 257800*mib/1000/200)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "MiB/s") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a render with every write counted
	r.Done("a.safetensors", nil)
	r.Close()
	// 257.8 MiB / 0.648 s = 397.8 MiB/s (the bytes are rounded to whole MiB per write).
	if !regexp.MustCompile(`a\.safetensors .* 397\.\d MiB/s`).MatchString(buf.String()) {
		t.Errorf("no 397.x MiB/s for 257.8 MiB in 648 ms:\n%s", strings.Join(screen(buf.String()), "\n"))
	}
}

// TestTerminalLogLinesStayAboveBars: a line another step logs while the bars are drawn
// is printed above them and is still on the screen at the end.
func TestTerminalLogLinesStayAboveBars(t *testing.T) {
	var buf syncBuffer
	con := console.New(&buf)
	r := newTerminalReporter(con, true)
	r.Start("a.bin", 100, 0)
	r.Add("a.bin", 10)
	time.Sleep(300 * time.Millisecond) // the bars are drawn
	con.Write([]byte("21:00:00 INFO  building step=sgl-kernel\n"))
	r.Add("a.bin", 20)
	time.Sleep(300 * time.Millisecond) // and drawn again
	r.Add("a.bin", 70)
	r.Done("a.bin", nil)
	r.Close()
	con.Write([]byte("21:00:01 INFO  done step=weights\n"))
	lines := screen(buf.String())
	logAt, totalAt := lineWith(lines, "building step=sgl-kernel"), lineWith(lines, "total")
	if logAt < 0 || totalAt < 0 || logAt > totalAt {
		t.Errorf("the log line is not above the bars on the screen (log %d, total %d):\n%s", logAt, totalAt, strings.Join(lines, "\n"))
	}
	if lineWith(lines, "done step=weights") < 0 {
		t.Errorf("a line logged after the bars is lost:\n%s", strings.Join(lines, "\n"))
	}
}

// TestTerminalInterruptedBar: a download cancelled halfway keeps its bar, marked
// interrupted, and the total does not look complete.
func TestTerminalInterruptedBar(t *testing.T) {
	var buf syncBuffer
	r := newTerminalReporter(&buf, true)
	r.Start("a.bin", 100, 0)
	r.Start("b.bin", 100, 0)
	r.Add("a.bin", 50)
	r.Add("b.bin", 100)
	r.Done("b.bin", nil)
	r.Done("a.bin", context.Canceled)
	r.Close()
	lines := screen(buf.String())
	if lineWith(lines, "a.bin", "interrupted") < 0 || lineWith(lines, "total", "interrupted") < 0 {
		t.Errorf("no interrupted bar:\n%s", strings.Join(lines, "\n"))
	}
	if lineWith(lines, "total", "150.0 b / 200.0 b") < 0 {
		t.Errorf("total does not show 150 of 200 bytes:\n%s", strings.Join(lines, "\n"))
	}
}

// TestTerminalCompleteTotalSaysDone: when every file is complete, the total says how long
// it took and the average speed of the bytes fetched, not a frozen speed with "ETA 0s".
func TestTerminalCompleteTotalSaysDone(t *testing.T) {
	var buf syncBuffer
	r := newTerminalReporter(&buf, true)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := t0
	r.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	const mib = 1 << 20
	r.Start("a.bin", 10*mib, 4*mib) // 4 MiB kept from an earlier run
	r.Start("b.bin", 10*mib, 0)
	for i := 1; i <= 8; i++ {
		mu.Lock()
		clock = t0.Add(time.Duration(i) * time.Second)
		mu.Unlock()
		r.Add("a.bin", 6*mib/8)
		r.Add("b.bin", 10*mib/8)
	}
	r.Done("a.bin", nil)
	r.Done("b.bin", nil)
	r.Close()
	lines := screen(buf.String())
	// 16 MiB fetched in 8 s.
	if i := lineWith(lines, "total", "20.0 MiB / 20.0 MiB", "done in 8s, 2.0 MiB/s"); i < 0 || strings.Contains(lines[i], "ETA") {
		t.Errorf("the complete total does not say \"done in 8s, 2.0 MiB/s\":\n%s", strings.Join(lines, "\n"))
	}
}
