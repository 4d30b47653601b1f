// The streaming JSON reader under the answer's decoding: objects, lists and literals
// read by the byte, strings decoded in pieces into a keeper, nesting bounded, values the
// gate does not need skipped without being kept.

package gate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

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

// nextIs reports whether the next value starts with c ('{' an object, '[' a list). A
// value that does not is skipped, and nextIs returns false with the skip's error.
func (j *jsonReader) nextIs(c byte) (bool, error) {
	got, err := j.peek()
	if err != nil {
		return false, err
	}
	if got != c {
		return false, j.skip(nil)
	}
	return true, nil
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

// word reads the bytes of a bare literal (digits, letters, sign, point), at most
// maxSmallBytes of them.
func (j *jsonReader) word() ([]byte, error) {
	var b []byte
	for {
		c, err := j.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '+' || c == '.') {
			_ = j.br.UnreadByte()
			break
		}
		if len(b) >= maxSmallBytes {
			return nil, errSyntax
		}
		b = append(b, c)
	}
	return b, nil
}

// literal reads a number, true, false or null.
func (j *jsonReader) literal() (string, error) {
	b, err := j.word()
	if err != nil {
		return "", err
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
		if err := j.escape(out); err != nil {
			return err
		}
	}
}

// escape decodes the escape after a backslash in a string into out.
func (j *jsonReader) escape(out func(p []byte)) error {
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
		return j.unicodeEscape(out)
	default:
		return fmt.Errorf("%w: bad escape in a string", errSyntax)
	}
	return nil
}

// unicodeEscape decodes a \u escape (its "\u" read) into out as UTF-8: a surrogate pair
// as the one rune it stands for, a lone surrogate as U+FFFD.
func (j *jsonReader) unicodeEscape(out func(p []byte)) error {
	var enc [utf8.UTFMax]byte
	r, err := j.hex4()
	if err != nil {
		return err
	}
	if utf8.ValidRune(r) {
		out(enc[:utf8.EncodeRune(enc[:], r)])
		return nil
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
				return nil
			}
			out(enc[:utf8.EncodeRune(enc[:], utf8.RuneError)])
			if !utf8.ValidRune(r2) {
				r2 = utf8.RuneError
			}
			out(enc[:utf8.EncodeRune(enc[:], r2)])
			return nil
		}
	}
	out(enc[:utf8.EncodeRune(enc[:], utf8.RuneError)])
	return nil
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
