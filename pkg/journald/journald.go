// Package journald sends log records to the systemd journal over its native protocol, so
// that each record keeps its priority (PRIORITY=3 for an error, 4 for a warning) and its
// fields (STEP, RECIPE, EXIT_CODE) as journal fields, where a line written to a journal
// stream gets PRIORITY=6 whatever it says.
//
// A Writer takes the lines of a logfmt or JSON logger (one record per line) and sends
// each as one entry; any other line is sent as it is, at PRIORITY=6. It is used in place
// of stderr when stderr is the journal's stream (JOURNAL_STREAM names it), the upgrade
// systemd's documentation describes; when the socket cannot be used, the line goes to the
// stream instead, so nothing is lost.
package journald

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// Socket is the journal's native socket.
const Socket = "/run/systemd/journal/socket"

// StderrIsJournal reports whether stderr is the journal's stream: JOURNAL_STREAM is set
// (by systemd, for a unit whose output goes to the journal) to the device and inode of
// the file stderr is.
func StderrIsJournal(getenv func(string) string) bool {
	var dev, ino uint64
	if _, err := fmt.Sscanf(getenv("JOURNAL_STREAM"), "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(os.Stderr.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// Priorities of the journal (syslog's levels).
const (
	PriCrit    = 2
	PriErr     = 3
	PriWarning = 4
	PriInfo    = 6
	PriDebug   = 7
)

// MaxEntry bounds one entry's bytes, every field and the message together (one
// datagram): a longer field is cut, then fields that no longer fit are left out (the
// message names every key as key=value too), then the message is cut, saying so.
const MaxEntry = 48 << 10

// maxFieldValue bounds the value of one field other than MESSAGE; fieldsBudget bounds
// them all together, so that MESSAGE keeps at least the rest of MaxEntry.
const (
	maxFieldValue = 8 << 10
	fieldsBudget  = MaxEntry / 2
)

// cutNote ends a message that was cut to fit MaxEntry.
const cutNote = " [cut: the entry was longer than the journal datagram sglprov sends]"

// fieldOverhead is the most bytes a field takes beyond its key and value (the binary
// form: a newline, 8 bytes of length, a newline).
const fieldOverhead = 10

// maxLine bounds a line held while its end has not come yet.
const maxLine = 256 << 10

// Writer sends each line written to it as one journal entry. Its zero value is not
// usable; call NewWriter.
type Writer struct {
	mu         sync.Mutex
	socket     string
	identifier string
	fallback   io.Writer
	conn       *net.UnixConn
	partial    []byte
}

// NewWriter returns a Writer sending to socket (Socket on a real host) under
// SYSLOG_IDENTIFIER identifier, and writing to fallback the lines it cannot send.
func NewWriter(socket, identifier string, fallback io.Writer) *Writer {
	return &Writer{socket: socket, identifier: identifier, fallback: fallback}
}

// Write sends every whole line of p; the start of a line not ended yet is kept (at most
// 256 KiB, then sent as a line of its own).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			if len(w.partial) >= maxLine {
				w.sendLine(w.partial)
				w.partial = w.partial[:0]
			}
			break
		}
		line := p[:i]
		if len(w.partial) > 0 {
			line = append(w.partial, line...)
			w.partial = w.partial[:0]
		}
		w.sendLine(line)
		p = p[i+1:]
	}
	return n, nil
}

func (w *Writer) sendLine(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	msg, prio, fields := ParseRecord(string(line))
	if err := w.send(msg, prio, fields); err != nil {
		_, _ = w.fallback.Write(append(line, '\n'))
	}
}

func (w *Writer) send(msg string, prio int, fields map[string]string) error {
	if w.conn == nil {
		c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: w.socket, Net: "unixgram"})
		if err != nil {
			return fmt.Errorf("connecting to the journal: %w", err)
		}
		w.conn = c
	}
	var b bytes.Buffer
	field(&b, "PRIORITY", strconv.Itoa(prio))
	if w.identifier != "" {
		field(&b, "SYSLOG_IDENTIFIER", w.identifier)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fields[k]
		if len(v) > maxFieldValue {
			v = cutUTF8(v, maxFieldValue) + " [cut]"
		}
		if b.Len()+len(k)+len(v)+fieldOverhead > fieldsBudget {
			continue // the message has it as key=value
		}
		field(&b, k, v)
	}
	if room := MaxEntry - b.Len() - len("MESSAGE") - fieldOverhead; len(msg) > room {
		msg = cutUTF8(msg, room-len(cutNote)) + cutNote
	}
	field(&b, "MESSAGE", msg)
	_ = w.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := w.conn.Write(b.Bytes()); err != nil {
		w.conn.Close()
		w.conn = nil
		return fmt.Errorf("sending to the journal: %w", err)
	}
	return nil
}

// cutUTF8 returns at most n bytes of s, not splitting a character.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// field appends one field in the native protocol: KEY=value, or, for a value with a
// newline, KEY, a newline, its length as 64-bit little endian and the value.
func field(b *bytes.Buffer, key, value string) {
	if !strings.Contains(value, "\n") {
		b.WriteString(key)
		b.WriteByte('=')
		b.WriteString(value)
		b.WriteByte('\n')
		return
	}
	b.WriteString(key)
	b.WriteByte('\n')
	n := uint64(len(value))
	for i := 0; i < 8; i++ {
		b.WriteByte(byte(n >> (8 * i)))
	}
	b.WriteString(value)
	b.WriteByte('\n')
}

// ParseRecord reads one log line of a JSON or logfmt logger: its message (the msg
// followed by the other keys as key=value, as a person reads it in journalctl), its
// priority from its level, and its keys as journal fields (upper case, other characters
// as _; time, level and msg left out: the journal has its own). A line of neither format
// is the message itself at PRIORITY=6.
func ParseRecord(line string) (msg string, prio int, fields map[string]string) {
	kvs, ok := parseJSON(line)
	if !ok {
		kvs, ok = parseLogfmt(line)
	}
	if !ok {
		return line, PriInfo, nil
	}
	prio = PriInfo
	fields = map[string]string{}
	var rest []string
	for _, kv := range kvs {
		switch kv.k {
		case "time", "ts":
			continue
		case "level", "lvl":
			prio = priority(kv.v)
			continue
		case "msg", "message":
			msg = kv.v
			continue
		}
		name := fieldName(kv.k)
		if name == "" {
			continue
		}
		fields[name] = kv.v
		v := kv.v
		if v == "" || strings.ContainsAny(v, " \"=\n") {
			v = strconv.Quote(v)
		}
		rest = append(rest, kv.k+"="+v)
	}
	if len(rest) > 0 {
		if msg != "" {
			msg += " "
		}
		msg += strings.Join(rest, " ")
	}
	return msg, prio, fields
}

func priority(level string) int {
	switch strings.ToLower(level) {
	case "debug", "debu":
		return PriDebug
	case "warn", "warning":
		return PriWarning
	case "error", "erro":
		return PriErr
	case "fatal", "fata":
		return PriCrit
	}
	return PriInfo
}

// fieldName maps a log key to a journal field name: upper case letters, digits and _,
// not starting with _ or a digit (those are the journal's own or invalid), at most 64
// bytes.
func fieldName(k string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(k) {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), "_0123456789")
	if len(s) > 64 {
		s = s[:64]
	}
	switch s {
	case "", "PRIORITY", "MESSAGE", "SYSLOG_IDENTIFIER", "MESSAGE_ID", "CODE_FILE", "CODE_LINE", "CODE_FUNC":
		return ""
	}
	return s
}

type kv struct{ k, v string }

// parseJSON reads a JSON object with a "msg" or "level" key, in key order.
func parseJSON(line string) ([]kv, bool) {
	if !strings.HasPrefix(line, "{") {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []kv
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(raw)
		}
		out = append(out, kv{k, s})
	}
	return out, hasLogKeys(out)
}

// parseLogfmt reads key=value pairs, values bare or double-quoted with Go escapes.
func parseLogfmt(line string) ([]kv, bool) {
	var out []kv
	s := strings.TrimSpace(line)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || strings.ContainsAny(s[:eq], " \"") {
			return nil, false
		}
		k := s[:eq]
		s = s[eq+1:]
		var v string
		if strings.HasPrefix(s, `"`) {
			end := closingQuote(s)
			if end < 0 {
				return nil, false
			}
			u, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, false
			}
			v, s = u, s[end+1:]
		} else {
			sp := strings.IndexByte(s, ' ')
			if sp < 0 {
				sp = len(s)
			}
			v, s = s[:sp], s[sp:]
		}
		out = append(out, kv{k, v})
		s = strings.TrimLeft(s, " ")
	}
	return out, hasLogKeys(out)
}

// closingQuote returns the index of the quote that ends the quoted string s starts with.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

func hasLogKeys(kvs []kv) bool {
	for _, x := range kvs {
		if x.k == "level" || x.k == "msg" {
			return true
		}
	}
	return false
}
