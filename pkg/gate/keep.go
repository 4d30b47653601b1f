// What the gate reads and keeps of one answer: the bounds, and the keeper that holds the
// head and the tail of a text of any length in bounded memory.

package gate

import (
	"strings"
	"unicode/utf8"
)

// Bounds of what the gate reads and keeps of one answer. The answer is decoded as it
// arrives: only these parts of it are ever in memory, whatever its size.
const (
	// MaxAnswerBytes is the most bytes of one answer the gate reads; a longer answer
	// fails its case.
	MaxAnswerBytes = 8 << 20
	// KeepHeadBytes and KeepTailBytes are how much of each text of an answer (content,
	// reasoning_content, a tool call's name) the gate keeps and judges: its first
	// KeepHeadBytes and its last KeepTailBytes. The middle of a longer text is counted,
	// not kept; the detectors and the expectations look at both ends.
	KeepHeadBytes = 128 << 10
	KeepTailBytes = 32 << 10
	// MaxArgumentsBytes is the longest tool-call arguments string the gate parses; longer
	// arguments fail the case.
	MaxArgumentsBytes = 128 << 10
	// MaxToolCalls is how many tool calls of one answer the gate keeps; later ones are
	// counted.
	MaxToolCalls = 16
)

const (
	// maxSmallBytes bounds the short values the gate keeps whole: keys, finish_reason,
	// matched_stop, numbers, the raw text of a value of the wrong type (for its sample).
	maxSmallBytes = 1024
	// maxDepth bounds the nesting of the answer's JSON.
	maxDepth = 64
	// prefixBytes of the body are kept to show an answer that is not JSON.
	prefixBytes = 256
)

// text is what the gate keeps of one text of an answer: all of it when it is short, else
// its head and its tail and the size of the whole.
type text struct {
	head, tail string
	size       int64
}

// cut reports whether the middle of the text was dropped.
func (t text) cut() bool { return t.size > int64(len(t.head)+len(t.tail)) }

// parts returns what was kept: the whole text, or its head and its tail.
func (t text) parts() []string {
	if t.tail == "" {
		return []string{t.head}
	}
	return []string{t.head, t.tail}
}

// blank reports whether the kept text is empty or white space.
func (t text) blank() bool {
	for _, p := range t.parts() {
		if strings.TrimSpace(p) != "" {
			return false
		}
	}
	return true
}

// keeper collects a text as it is decoded, keeping its head and its tail.
type keeper struct {
	headMax, tailMax int
	head, tail       []byte
	size             int64
}

func (k *keeper) write(p []byte) {
	k.size += int64(len(p))
	if room := k.headMax - len(k.head); room > 0 {
		n := min(room, len(p))
		k.head = append(k.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 || k.tailMax == 0 {
		return
	}
	k.tail = append(k.tail, p...)
	if len(k.tail) > 2*k.tailMax {
		n := copy(k.tail, k.tail[len(k.tail)-k.tailMax:])
		k.tail = k.tail[:n]
	}
}

// text returns what was kept: the whole text when nothing was dropped; else the head and
// the tail, each cut at a rune boundary.
func (k *keeper) text() text {
	head, tail := k.head, k.tail
	if len(tail) > k.tailMax {
		tail = tail[len(tail)-k.tailMax:]
	}
	if k.size == int64(len(head)+len(tail)) {
		return text{head: validUTF8(append(head, tail...)), size: k.size}
	}
	// An incomplete rune at the end of the head, or continuation bytes at the start of
	// the tail, belong to runes that were cut.
	for i := 1; i <= utf8.UTFMax && i <= len(head); i++ {
		if utf8.RuneStart(head[len(head)-i]) {
			if !utf8.FullRune(head[len(head)-i:]) {
				head = head[:len(head)-i]
			}
			break
		}
	}
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	return text{head: validUTF8(head), tail: validUTF8(tail), size: k.size}
}

// validUTF8 returns b with each byte that is not part of a valid UTF-8 sequence replaced
// by U+FFFD, as encoding/json decodes a string.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}

// small returns a keeper for a short value kept whole (up to maxSmallBytes).
func small() *keeper { return &keeper{headMax: maxSmallBytes} }
