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

// logf renders a structured line as the text log does: msg, then key=value.
func (l *lines) logf(msg string, keyvals ...any) {
	var b strings.Builder
	b.WriteString(msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		fmt.Fprintf(&b, " %v=%v", keyvals[i], keyvals[i+1])
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, b.String())
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
		"downloading file=a.safetensors bytes=400.0 MiB total_bytes=1000.0 MiB percent=40 bytes_per_second=30.0 MiB/s eta_seconds=20.000",
		"downloading file=b.json bytes=2.0 KiB bytes_per_second=204 B/s",
		"downloading file=a.safetensors bytes=500.0 MiB total_bytes=1000.0 MiB percent=50 bytes_per_second=10.0 MiB/s eta_seconds=50.000",
		"downloading file=b.json bytes=2.0 KiB bytes_per_second=0 B/s",
		"downloaded file=b.json bytes=2.0 KiB seconds=20.000 bytes_per_second=102 B/s",
		"download failed file=a.safetensors bytes=500.0 MiB err=connection reset",
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
	if got := out.get(); len(got) < 2 || !strings.HasPrefix(got[0], "downloading file=w.bin bytes=0 B total_bytes=10 B percent=0") {
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
		for _, w := range []string{"downloaded file=a.bin bytes=3.0 MiB seconds=", "downloaded file=b.bin bytes=1.0 MiB seconds="} {
			if !strings.Contains(got, w) {
				t.Errorf("lines %q lack %q", got, w)
			}
		}
	})
}
