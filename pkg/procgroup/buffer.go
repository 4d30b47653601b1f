package procgroup

import (
	"bytes"
	"sync"
)

// Tail keeps the last Max bytes written to it: the end of a child's output, where a
// failure's reason usually is. It is safe for concurrent use.
type Tail struct {
	// Max is how many bytes are kept.
	Max int

	mu sync.Mutex
	b  []byte
}

// Write keeps the last Max bytes of what has been written; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.Max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what is kept.
func (t *Tail) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.b)
}

// String returns what is kept, invalid UTF-8 (a character cut in two) replaced by "?".
func (t *Tail) String() string { return string(bytes.ToValidUTF8(t.Bytes(), []byte("?"))) }

// Head keeps the first Max bytes written to it: the start of a child's output, where a
// version or a banner is. It is safe for concurrent use.
type Head struct {
	// Max is how many bytes are kept.
	Max int

	mu sync.Mutex
	b  []byte
}

// Write keeps what still fits within Max bytes; it never fails, so the child's output
// is read to its end.
func (h *Head) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.Max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what is kept.
func (h *Head) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return bytes.Clone(h.b)
}

// String returns what is kept, invalid UTF-8 replaced by "?".
func (h *Head) String() string { return string(bytes.ToValidUTF8(h.Bytes(), []byte("?"))) }
