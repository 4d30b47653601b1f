package smoke

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// chatResponse is what the gate keeps of an SGLang ChatCompletionResponse.
type chatResponse struct {
	// choices is how many choices the answer had; the fields below are the first one's.
	choices             int
	content, reasoning  text
	finish, matchedStop string
	// shapeErr names a field of the wrong JSON type (a content that is a number).
	shapeErr string
	// calls are the first MaxToolCalls tool calls; callErr says what is wrong with them.
	calls   []ToolCall
	callErr string
}

var errAnswerTooLarge = fmt.Errorf("answer is larger than %d MiB, the most the gate reads", MaxAnswerBytes>>20)

// limitedBody reads at most MaxAnswerBytes of r and fails past them; it keeps the first
// bytes for the verdict on an answer that is not JSON.
type limitedBody struct {
	r      io.Reader
	left   int64
	prefix []byte
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, errAnswerTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if room := prefixBytes - len(l.prefix); room > 0 {
		l.prefix = append(l.prefix, p[:min(room, n)]...)
	}
	return n, err
}

// errSyntax is an answer that is not JSON.
var errSyntax = errors.New("not JSON")

// decodeAnswer decodes a chat answer as it is read, keeping only what the verdict needs
// (see the Keep* bounds). Its error says why the answer is not a JSON chat response.
func decodeAnswer(r io.Reader) (chatResponse, error) {
	body := &limitedBody{r: r, left: MaxAnswerBytes}
	j := &jsonReader{br: bufio.NewReaderSize(body, 32<<10)}
	var resp chatResponse
	err := j.decodeTop(&resp)
	if err == nil {
		// Nothing but white space may follow the answer.
		if _, perr := j.peek(); perr == nil {
			err = errSyntax
		} else if !errors.Is(perr, io.ErrUnexpectedEOF) {
			err = perr
		}
	}
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, errAnswerTooLarge):
		return resp, errAnswerTooLarge
	case errors.Is(err, errSyntax), errors.Is(err, io.ErrUnexpectedEOF):
		return resp, fmt.Errorf("answer is not JSON: %s", Sample(string(body.prefix), SampleRunes))
	}
	return resp, fmt.Errorf("reading answer: %s", shortErr(err))
}

func (j *jsonReader) decodeTop(resp *chatResponse) error {
	c, err := j.peek()
	if err != nil {
		return err
	}
	if c != '{' {
		return errSyntax
	}
	return j.object(func(key string) error {
		if key != "choices" {
			return j.skip(nil)
		}
		c, err := j.peek()
		if err != nil {
			return err
		}
		if c != '[' {
			// null is "no choices"; anything else is not a list of them.
			if c != 'n' && resp.shapeErr == "" {
				resp.shapeErr = "choices is " + kindName(c) + ", not a list as the OpenAI chat protocol defines it"
			}
			return j.skip(nil)
		}
		resp.choices = 0
		return j.array(func(i int) error {
			resp.choices++
			if i > 0 {
				return j.skip(nil)
			}
			return j.decodeChoice(resp)
		})
	})
}

func (j *jsonReader) decodeChoice(resp *chatResponse) error {
	c, err := j.peek()
	if err != nil {
		return err
	}
	if c != '{' {
		if resp.shapeErr == "" {
			resp.shapeErr = "choices[0] is " + kindName(c) + ", not an object"
		}
		return j.skip(nil)
	}
	return j.object(func(key string) error {
		switch key {
		case "message":
			c, err := j.peek()
			if err != nil {
				return err
			}
			if c != '{' {
				if c != 'n' && resp.shapeErr == "" {
					resp.shapeErr = "choices[0].message is " + kindName(c) + ", not an object"
				}
				return j.skip(nil)
			}
			return j.object(func(key string) error {
				switch key {
				case "content":
					return j.textField("message.content", &resp.content, resp)
				case "reasoning_content":
					return j.textField("message.reasoning_content", &resp.reasoning, resp)
				case "tool_calls":
					return j.toolCalls(resp)
				}
				return j.skip(nil)
			})
		case "finish_reason":
			var t text
			if err := j.textField("finish_reason", &t, resp); err != nil {
				return err
			}
			resp.finish = t.head
			return nil
		case "matched_stop":
			// A string (a stop string, or "NaN happened"), a number (a stop token id)
			// or null.
			c, err := j.peek()
			if err != nil {
				return err
			}
			k := small()
			if c == '"' {
				err = j.str(k)
			} else {
				err = j.skip(k)
			}
			resp.matchedStop = k.text().head
			if c == 'n' {
				resp.matchedStop = ""
			}
			return err
		}
		return j.skip(nil)
	})
}

// textField reads a field the protocol defines as a string or null into t; a value of
// another type is skipped and named in resp.shapeErr.
func (j *jsonReader) textField(name string, t *text, resp *chatResponse) error {
	c, err := j.peek()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		k := &keeper{headMax: KeepHeadBytes, tailMax: KeepTailBytes}
		err := j.str(k)
		*t = k.text()
		return err
	case 'n':
		*t = text{}
		return j.skip(nil)
	}
	raw := small()
	if err := j.skip(raw); err != nil {
		return err
	}
	*t = text{}
	if resp.shapeErr == "" {
		resp.shapeErr = fmt.Sprintf("%s is %s, not a string or null as the OpenAI chat protocol defines it: %s",
			name, kindName(c), Sample(raw.text().head, SampleRunes))
	}
	return nil
}

// toolCalls reads an OpenAI tool_calls list; null, absent or [] is no call. A call's
// function.arguments must be a JSON string holding the arguments as JSON text, as the
// OpenAI protocol defines it: a client that parses the string fails on an object sent
// in its place, so the gate fails it too.
func (j *jsonReader) toolCalls(resp *chatResponse) error {
	c, err := j.peek()
	if err != nil {
		return err
	}
	resp.calls, resp.callErr = nil, ""
	if c == 'n' {
		return j.skip(nil)
	}
	fail := func(msg string) {
		if resp.callErr == "" {
			resp.callErr = msg
		}
	}
	if c != '[' {
		raw := small()
		err := j.skip(raw)
		fail("tool_calls is not a list of calls: " + Sample(raw.text().head, SampleRunes))
		return err
	}
	seen := 0
	err = j.array(func(int) error {
		seen++
		c, err := j.peek()
		if err != nil {
			return err
		}
		if c != '{' {
			raw := small()
			err := j.skip(raw)
			fail("tool_calls is not a list of calls: a call is " + kindName(c) + ": " + Sample(raw.text().head, SampleRunes))
			return err
		}
		if seen > MaxToolCalls {
			return j.skip(nil)
		}
		var call ToolCall
		var argsKind byte
		var argsRaw text
		err = j.object(func(key string) error {
			if key != "function" {
				return j.skip(nil)
			}
			c, err := j.peek()
			if err != nil {
				return err
			}
			if c != '{' {
				return j.skip(nil)
			}
			return j.object(func(key string) error {
				switch key {
				case "name":
					var t text
					if err := j.textField("function.name", &t, resp); err != nil {
						return err
					}
					call.Name = t.head
					return nil
				case "arguments":
					c, err := j.peek()
					if err != nil {
						return err
					}
					argsKind = c
					if c == '"' {
						k := &keeper{headMax: MaxArgumentsBytes}
						err = j.str(k)
						argsRaw = k.text()
						return err
					}
					k := small()
					err = j.skip(k)
					argsRaw = k.text()
					return err
				}
				return j.skip(nil)
			})
		})
		if err != nil {
			return err
		}
		switch {
		case argsKind != '"':
			fail(fmt.Sprintf("tool call %s: function.arguments is %s, not a string holding JSON as the OpenAI protocol defines it: %s",
				call.Name, kindName(argsKind), Sample(argsRaw.head, SampleRunes)))
		case argsRaw.cut():
			fail(fmt.Sprintf("tool call %s: function.arguments is %d bytes, more than the %d KiB the gate parses",
				call.Name, argsRaw.size, MaxArgumentsBytes>>10))
		}
		call.Arguments = argsRaw.head
		resp.calls = append(resp.calls, call)
		return nil
	})
	return err
}

// small returns a keeper for a short value kept whole (up to maxSmallBytes).
func small() *keeper { return &keeper{headMax: maxSmallBytes} }

// kindName names the JSON type of a value by its first byte.
func kindName(c byte) string {
	switch c {
	case 0:
		return "absent"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// jsonReader is a streaming JSON reader: strings are decoded in pieces into a keeper,
// values the gate does not need are skipped without being kept.
type jsonReader struct {
	br    *bufio.Reader
	depth int
}

// peek returns the next byte that is not white space, without consuming it.
func (j *jsonReader) peek() (byte, error) {
	for {
		c, err := j.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		_ = j.br.UnreadByte()
		return c, nil
	}
}

// next consumes the next byte that is not white space.
func (j *jsonReader) next() (byte, error) {
	c, err := j.peek()
	if err == nil {
		_, _ = j.br.ReadByte()
	}
	return c, err
}

func (j *jsonReader) enter() error {
	j.depth++
	if j.depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", errSyntax, maxDepth)
	}
	return nil
}

// object reads an object, calling field for each key with the reader before its value;
// field must consume the value.
func (j *jsonReader) object(field func(key string) error) error {
	if c, err := j.next(); err != nil || c != '{' {
		return orSyntax(err)
	}
	if err := j.enter(); err != nil {
		return err
	}
	defer func() { j.depth-- }()
	if c, err := j.peek(); err != nil {
		return err
	} else if c == '}' {
		_, _ = j.br.ReadByte()
		return nil
	}
	for {
		if c, err := j.peek(); err != nil || c != '"' {
			return orSyntax(err)
		}
		k := small()
		if err := j.str(k); err != nil {
			return err
		}
		if c, err := j.next(); err != nil || c != ':' {
			return orSyntax(err)
		}
		if err := field(k.text().head); err != nil {
			return err
		}
		c, err := j.next()
		switch {
		case err != nil:
			return err
		case c == ',':
		case c == '}':
			return nil
		default:
			return errSyntax
		}
	}
}

// array reads a list, calling elem for each element with the reader before it; elem
// must consume it.
func (j *jsonReader) array(elem func(i int) error) error {
	if c, err := j.next(); err != nil || c != '[' {
		return orSyntax(err)
	}
	if err := j.enter(); err != nil {
		return err
	}
	defer func() { j.depth-- }()
	if c, err := j.peek(); err != nil {
		return err
	} else if c == ']' {
		_, _ = j.br.ReadByte()
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		c, err := j.next()
		switch {
		case err != nil:
			return err
		case c == ',':
		case c == ']':
			return nil
		default:
			return errSyntax
		}
	}
}

func orSyntax(err error) error {
	if err != nil {
		return err
	}
	return errSyntax
}

// skip reads one value of any type; raw, when set, keeps its JSON text.
func (j *jsonReader) skip(raw *keeper) error {
	c, err := j.peek()
	if err != nil {
		return err
	}
	put := func(s string) {
		if raw != nil {
			raw.write([]byte(s))
		}
	}
	switch c {
	case '{':
		put("{")
		n := 0
		err := j.object(func(key string) error {
			if n > 0 {
				put(",")
			}
			n++
			b, _ := json.Marshal(key)
			put(string(b) + ":")
			return j.skip(raw)
		})
		put("}")
		return err
	case '[':
		put("[")
		err := j.array(func(i int) error {
			if i > 0 {
				put(",")
			}
			return j.skip(raw)
		})
		put("]")
		return err
	case '"':
		var dec *keeper
		if raw != nil {
			dec = small()
		}
		if err := j.str(dec); err != nil {
			return err
		}
		if raw != nil {
			b, _ := json.Marshal(dec.text().head)
			raw.write(b)
		}
		return nil
	}
	lit, err := j.literal()
	put(lit)
	return err
}

// literal reads a number, true, false or null.
func (j *jsonReader) literal() (string, error) {
	var b []byte
	for {
		c, err := j.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return "", err
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.') {
			_ = j.br.UnreadByte()
			break
		}
		if len(b) >= maxSmallBytes {
			return "", errSyntax
		}
		b = append(b, c)
	}
	switch s := string(b); {
	case s == "true" || s == "false" || s == "null":
		return s, nil
	case len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9') && json.Valid(b):
		return s, nil
	}
	return "", errSyntax
}

// str reads a string, decoding it into k (nil: discarded) in pieces as it arrives.
func (j *jsonReader) str(k *keeper) error {
	if c, err := j.next(); err != nil || c != '"' {
		return orSyntax(err)
	}
	out := func(p []byte) {
		if k != nil {
			k.write(p)
		}
	}
	var enc [utf8.UTFMax]byte
	for {
		if j.br.Buffered() == 0 {
			if _, err := j.br.Peek(1); err != nil {
				if errors.Is(err, io.EOF) {
					return io.ErrUnexpectedEOF
				}
				return err
			}
		}
		buf, _ := j.br.Peek(j.br.Buffered())
		i := 0
		for i < len(buf) && buf[i] != '"' && buf[i] != '\\' && buf[i] >= 0x20 {
			i++
		}
		out(buf[:i])
		_, _ = j.br.Discard(i)
		if i == len(buf) {
			continue
		}
		c, _ := j.br.ReadByte()
		switch {
		case c == '"':
			return nil
		case c < 0x20:
			return fmt.Errorf("%w: control character in a string", errSyntax)
		}
		e, err := j.br.ReadByte()
		if err != nil {
			return orEOF(err)
		}
		switch e {
		case '"', '\\', '/':
			out([]byte{e})
		case 'b':
			out([]byte{'\b'})
		case 'f':
			out([]byte{'\f'})
		case 'n':
			out([]byte{'\n'})
		case 'r':
			out([]byte{'\r'})
		case 't':
			out([]byte{'\t'})
		case 'u':
			r, err := j.hex4()
			if err != nil {
				return err
			}
			if utf8.ValidRune(r) {
				out(enc[:utf8.EncodeRune(enc[:], r)])
				continue
			}
			if r >= 0xD800 && r < 0xDC00 {
				// A high surrogate: a low one must follow as another \u escape.
				if p, _ := j.br.Peek(2); len(p) == 2 && p[0] == '\\' && p[1] == 'u' {
					_, _ = j.br.Discard(2)
					r2, err := j.hex4()
					if err != nil {
						return err
					}
					if r2 >= 0xDC00 && r2 < 0xE000 {
						r = (r-0xD800)<<10 + (r2 - 0xDC00) + 0x10000
						out(enc[:utf8.EncodeRune(enc[:], r)])
						continue
					}
					out(enc[:utf8.EncodeRune(enc[:], utf8.RuneError)])
					if !utf8.ValidRune(r2) {
						r2 = utf8.RuneError
					}
					out(enc[:utf8.EncodeRune(enc[:], r2)])
					continue
				}
			}
			out(enc[:utf8.EncodeRune(enc[:], utf8.RuneError)])
		default:
			return fmt.Errorf("%w: bad escape in a string", errSyntax)
		}
	}
}

func (j *jsonReader) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := j.br.ReadByte()
		if err != nil {
			return 0, orEOF(err)
		}
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%w: bad \\u escape", errSyntax)
		}
		r = r<<4 | rune(v)
	}
	return r, nil
}

func orEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
