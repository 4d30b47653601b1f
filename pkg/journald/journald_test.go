package journald

import (
	"bytes"
	"encoding/binary"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"charm.land/log/v2"
)

// listen opens a real unixgram socket standing in for journald's, and returns a function
// that reads one datagram and decodes it as journald does (the native protocol).
func listen(t *testing.T) (string, func() map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "socket")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	read := func() map[string]string {
		t.Helper()
		buf := make([]byte, 1<<17)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no entry reached the journal socket: %v", err)
		}
		return decode(t, buf[:n])
	}
	return path, read
}

// decode reads the native protocol: KEY=value lines, or KEY, newline, a 64-bit little
// endian length, the value and a newline.
func decode(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			t.Fatalf("entry without a final newline: %q", b)
		}
		line := b[:nl]
		if k, v, ok := bytes.Cut(line, []byte("=")); ok {
			out[string(k)] = string(v)
			b = b[nl+1:]
			continue
		}
		rest := b[nl+1:]
		n := binary.LittleEndian.Uint64(rest[:8])
		out[string(line)] = string(rest[8 : 8+n])
		b = rest[8+n+1:]
	}
	return out
}

// A real charm logger in logfmt and JSON, as sglprov's commands make it: each level gets
// its syslog priority and each key its field, where the stream gave every line PRIORITY=6.
func TestRecordsKeepPriorityAndFields(t *testing.T) {
	for _, format := range []log.Formatter{log.LogfmtFormatter, log.JSONFormatter} {
		path, read := listen(t)
		var fallback bytes.Buffer
		w := NewWriter(path, "sglprov", &fallback)
		l := log.NewWithOptions(w, log.Options{Formatter: format, Level: log.DebugLevel, ReportTimestamp: true})
		l = l.With("recipe", "qwen")
		l.Error("sglprov apply failed", "err", "step weights: disk full", "exit_code", 1, "step", "weights")
		e := read()
		for k, want := range map[string]string{"PRIORITY": "3", "SYSLOG_IDENTIFIER": "sglprov", "RECIPE": "qwen", "STEP": "weights", "EXIT_CODE": "1", "ERR": "step weights: disk full"} {
			if e[k] != want {
				t.Errorf("%v: %s = %q, want %q (entry %v)", format, k, e[k], want, e)
			}
		}
		if !strings.HasPrefix(e["MESSAGE"], "sglprov apply failed ") || !strings.Contains(e["MESSAGE"], `err="step weights: disk full"`) {
			t.Errorf("%v: MESSAGE %q", format, e["MESSAGE"])
		}
		if _, ok := e["TIME"]; ok {
			t.Errorf("%v: the record's time became a field; the journal has its own", format)
		}
		l.Warn("canary failed", "failures", 2)
		if e := read(); e["PRIORITY"] != "4" || e["FAILURES"] != "2" {
			t.Errorf("%v: warning: %v", format, e)
		}
		l.Info("apply done")
		if e := read(); e["PRIORITY"] != "6" || e["MESSAGE"] != "apply done recipe=qwen" {
			t.Errorf("%v: info: %v", format, e)
		}
		l.Debug("x")
		if e := read(); e["PRIORITY"] != "7" {
			t.Errorf("%v: debug: %v", format, e)
		}
		if fallback.Len() > 0 {
			t.Errorf("%v: lines fell back to the stream: %q", format, fallback.String())
		}
	}
}

// A value with a newline (a failed step's whole error) travels in the binary-safe form;
// a line that is no log record goes as it is, at PRIORITY=6; a line written in pieces is
// one entry.
func TestMultilineAndPlainLines(t *testing.T) {
	path, read := listen(t)
	w := NewWriter(path, "sglprov", &bytes.Buffer{})
	l := log.NewWithOptions(w, log.Options{Formatter: log.LogfmtFormatter})
	l.Error("failed", "err", "line one\n  line two")
	if e := read(); e["ERR"] != "line one\n  line two" || e["PRIORITY"] != "3" {
		t.Errorf("multi-line value: %v", e)
	}
	w.Write([]byte("STEP   RESULT"))
	w.Write([]byte("  DURATION\n"))
	if e := read(); e["MESSAGE"] != "STEP   RESULT  DURATION" || e["PRIORITY"] != "6" {
		t.Errorf("plain line: %v", e)
	}
}

// An entry is at most MaxEntry bytes, all its fields together, however long the record's
// message and values (a 100 KB error): the long field is cut, the message is cut saying so,
// and the entry keeps its priority and identifier.
func TestEntryBoundedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "socket")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := NewWriter(path, "sglprov", &bytes.Buffer{})
	l := log.NewWithOptions(w, log.Options{Formatter: log.LogfmtFormatter})
	big := strings.Repeat("é", 25<<10) // 50 KB, two bytes a character
	for _, kv := range [][]any{
		{"err", big},
		{"err", big, "output", big, "cause", big},
		{"err", big + "\n" + big},
	} {
		l.Error(big, kv...)
		buf := make([]byte, 1<<20)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no entry reached the journal socket: %v", err)
		}
		e := decode(t, buf[:n])
		if n > MaxEntry {
			t.Errorf("an entry of %d bytes, more than %d", n, MaxEntry)
		}
		if e["PRIORITY"] != "3" || e["SYSLOG_IDENTIFIER"] != "sglprov" || !strings.HasSuffix(e["MESSAGE"], "[cut: the entry was longer than the journal datagram sglprov sends]") {
			t.Errorf("entry lacks its priority, identifier or cut note: PRIORITY=%q SYSLOG_IDENTIFIER=%q MESSAGE ends %q",
				e["PRIORITY"], e["SYSLOG_IDENTIFIER"], e["MESSAGE"][max(0, len(e["MESSAGE"])-80):])
		}
		for k, v := range e {
			if !utf8.ValidString(v) {
				t.Errorf("field %s was cut inside a character", k)
			}
		}
	}
}

// With no journal socket, nothing is lost: the lines go to the stream.
func TestNoSocketFallsBack(t *testing.T) {
	var fallback bytes.Buffer
	w := NewWriter(filepath.Join(t.TempDir(), "absent"), "sglprov", &fallback)
	l := log.NewWithOptions(w, log.Options{Formatter: log.LogfmtFormatter})
	l.Warn("canary failed", "step", "smoke")
	if got := fallback.String(); got != "level=warn msg=\"canary failed\" step=smoke\n" {
		t.Errorf("fallback got %q", got)
	}
}

func TestFieldNames(t *testing.T) {
	for in, want := range map[string]string{"exit_code": "EXIT_CODE", "step": "STEP", "_hidden": "HIDDEN", "9x": "X", "a.b-c": "A_B_C", "priority": "", "message": ""} {
		if got := fieldName(in); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", in, got, want)
		}
	}
}
