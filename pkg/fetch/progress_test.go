package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines collects log lines safely.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, fmt.Sprintf(format, args...))
}

func (l *lines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

func TestPipeReporterLines(t *testing.T) {
	var out lines
	r := NewPipeReporter(out.logf, time.Hour)
	defer r.Close()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return clock }
	const mib = 1 << 20

	r.Start("a.safetensors", 1000*mib, 100*mib) // resumed at 100 MiB
	r.Start("b.json", -1, 0)
	clock = clock.Add(10 * time.Second)
	r.Add("a.safetensors", 300*mib)
	r.Add("b.json", 2048)
	r.Report()
	clock = clock.Add(10 * time.Second)
	r.Add("a.safetensors", 100*mib)
	r.Report()
	r.Done("b.json", nil)
	r.Done("a.safetensors", errors.New("connection reset"))
	r.Report() // nothing active: no line

	want := []string{
		"a.safetensors: 400.0 MiB of 1000.0 MiB (40%), 30.0 MiB/s, ETA 20s",
		"b.json: 2.0 KiB, 204 B/s",
		"a.safetensors: 500.0 MiB of 1000.0 MiB (50%), 10.0 MiB/s, ETA 50s",
		"b.json: 2.0 KiB, 0 B/s",
		"b.json: done, 2.0 KiB in 20s (102 B/s)",
		"a.safetensors: failed after 500.0 MiB: connection reset",
	}
	if got := out.get(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPipeReporterTicks(t *testing.T) {
	var out lines
	r := NewPipeReporter(out.logf, 5*time.Millisecond)
	r.Start("w.bin", 10, 0)
	deadline := time.Now().Add(5 * time.Second)
	for len(out.get()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.Close()
	if got := out.get(); len(got) < 2 || !strings.HasPrefix(got[0], "w.bin: 0 B of 10 B (0%)") {
		t.Errorf("lines = %q, want periodic lines for w.bin", got)
	}
}

func TestReportersDuringFetch(t *testing.T) {
	data := randomBytes(t, 3<<20)
	fs := newFaultServer(t, map[string][]byte{"a": data, "b": data[:1<<20]})
	files := []File{
		{URL: fs.url("a"), Path: "a.bin", Size: int64(len(data)), SHA256: sha256Hex(data)},
		{URL: fs.url("b"), Path: "b.bin", Size: 1 << 20, SHA256: sha256Hex(data[:1<<20])},
	}
	t.Run("terminal bars", func(t *testing.T) {
		var buf bytes.Buffer
		r := newTerminalReporter(&buf, true)
		opt := testOptions(t.TempDir())
		opt.Progress = r
		if _, err := Fetch(context.Background(), files, opt); err != nil {
			t.Fatal(err)
		}
		r.Close()
		if !strings.Contains(buf.String(), "total") {
			t.Errorf("terminal output has no total bar:\n%q", buf.String())
		}
	})
	t.Run("pipe lines", func(t *testing.T) {
		var out lines
		r := NewPipeReporter(out.logf, time.Hour)
		opt := testOptions(t.TempDir())
		opt.Progress = r
		if _, err := Fetch(context.Background(), files, opt); err != nil {
			t.Fatal(err)
		}
		r.Close()
		got := strings.Join(out.get(), "\n")
		for _, w := range []string{"a.bin: done, 3.0 MiB in", "b.bin: done, 1.0 MiB in"} {
			if !strings.Contains(got, w) {
				t.Errorf("lines %q lack %q", got, w)
			}
		}
	})
}
