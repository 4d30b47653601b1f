// Decoding the parts of an answer that say how it was made: usage (token counts and the
// prefix cache's share), logprobs, and SGLang's native /generate meta_info.

package gate

import (
	"fmt"
	"math"
	"strconv"
)

// usage is an answer's token counts (OpenAI usage, or /generate's meta_info).
type usage struct {
	prompt, completion, total int64
	hasTotal                  bool
	// cached is prompt_tokens_details.cached_tokens (meta_info.cached_tokens); reported is
	// false when the answer carried no such count (SGLang reports it in usage only with
	// --enable-cache-report).
	cached   int64
	reported bool
}

// logprobStats is what the gate keeps of an answer's logprobs: how many values, and the
// first that is not a finite number at or below 0.
type logprobStats struct {
	present bool
	n       int
	bad     string
}

func (l *logprobStats) add(lit string, at int) {
	l.n++
	if l.bad != "" {
		return
	}
	v, err := strconv.ParseFloat(lit, 64)
	switch {
	case lit == "null":
		l.bad = fmt.Sprintf("logprob %d is null (SGLang writes a NaN as null)", at)
	case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
		l.bad = fmt.Sprintf("logprob %d is %s, not a finite number", at, lit)
	case v > 1e-6:
		l.bad = fmt.Sprintf("logprob %d is %s, above 0 (a probability above 1)", at, lit)
	}
}

// number reads a number literal, also Python's NaN, Infinity and -Infinity (which
// json.dumps writes), returning its text.
func (j *jsonReader) number() (string, error) {
	b, err := j.word()
	if err != nil {
		return "", err
	}
	switch s := string(b); s {
	case "NaN", "Infinity", "-Infinity", "null", "true", "false":
		return s, nil
	default:
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return "", errSyntax
		}
		return s, nil
	}
}

// count reads a token count: a whole number, or null (0).
func (j *jsonReader) count() (int64, bool, error) {
	c, err := j.peek()
	if err != nil {
		return 0, false, err
	}
	if c == '{' || c == '[' || c == '"' {
		return 0, false, j.skip(nil)
	}
	lit, err := j.number()
	if err != nil {
		return 0, false, err
	}
	v, perr := strconv.ParseFloat(lit, 64)
	if perr != nil {
		return 0, false, nil
	}
	return int64(v), true, nil
}

// usage reads an OpenAI usage object.
func (j *jsonReader) usage(resp *chatResponse) error {
	ok, err := j.nextIs('{')
	if !ok {
		return err
	}
	u := &usage{}
	resp.usage = u
	return j.object(func(key string) error {
		switch key {
		case "prompt_tokens":
			u.prompt, _, err = j.count()
			return err
		case "completion_tokens":
			u.completion, _, err = j.count()
			return err
		case "total_tokens":
			u.total, u.hasTotal, err = j.count()
			return err
		case "prompt_tokens_details":
			if ok, err := j.nextIs('{'); !ok {
				return err
			}
			return j.object(func(key string) error {
				if key != "cached_tokens" {
					return j.skip(nil)
				}
				u.cached, u.reported, err = j.count()
				return err
			})
		}
		return j.skip(nil)
	})
}

// logprobs reads a choice's logprobs: the chat shape ({"content": [{"logprob": ...}]})
// or the completions shape ({"token_logprobs": [...]}).
func (j *jsonReader) logprobs(l *logprobStats) error {
	if ok, err := j.nextIs('{'); !ok {
		return err
	}
	l.present = true
	return j.object(func(key string) error {
		switch key {
		case "content":
			if ok, err := j.nextIs('['); !ok {
				return err
			}
			return j.array(func(int) error {
				if ok, err := j.nextIs('{'); !ok {
					return err
				}
				return j.object(func(key string) error {
					if key != "logprob" {
						return j.skip(nil)
					}
					lit, err := j.number()
					if err == nil {
						l.add(lit, l.n)
					}
					return err
				})
			})
		case "token_logprobs":
			return j.literalList(func(lit string) { l.add(lit, l.n) })
		}
		return j.skip(nil)
	})
}

// literalList reads a list of literals, calling fn with each.
func (j *jsonReader) literalList(fn func(lit string)) error {
	if ok, err := j.nextIs('['); !ok {
		return err
	}
	return j.array(func(int) error { return j.numberOr(fn) })
}

// numberOr reads a literal (a number, or true, false, null) and calls fn with it; an
// object, a list or a string is skipped.
func (j *jsonReader) numberOr(fn func(lit string)) error {
	if c, err := j.peek(); err != nil || c == '{' || c == '[' || c == '"' {
		if err != nil {
			return err
		}
		return j.skip(nil)
	}
	lit, err := j.number()
	if err == nil {
		fn(lit)
	}
	return err
}

// metaInfo reads /generate's meta_info: finish_reason {"type", "matched"}, the token
// counts, cached_tokens and output_token_logprobs ([[logprob, token id, text], ...]).
func (j *jsonReader) metaInfo(resp *chatResponse) error {
	ok, err := j.nextIs('{')
	if !ok {
		return err
	}
	if resp.usage == nil {
		resp.usage = &usage{}
	}
	u := resp.usage
	return j.object(func(key string) error {
		switch key {
		case "finish_reason":
			return j.metaFinish(resp)
		case "prompt_tokens":
			u.prompt, _, err = j.count()
			return err
		case "completion_tokens":
			u.completion, _, err = j.count()
			return err
		case "cached_tokens":
			u.cached, u.reported, err = j.count()
			return err
		case "output_token_logprobs":
			return j.metaLogprobs(resp)
		}
		return j.skip(nil)
	})
}

// metaFinish reads meta_info's finish_reason: {"type", "matched"}, matched kept when
// it is a string.
func (j *jsonReader) metaFinish(resp *chatResponse) error {
	if ok, err := j.nextIs('{'); !ok {
		return err
	}
	return j.object(func(key string) error {
		switch key {
		case "type":
			var t text
			err := j.textField("meta_info.finish_reason.type", &t, resp)
			resp.finish = t.head
			return err
		case "matched":
			c, err := j.peek()
			if err != nil {
				return err
			}
			if c == '"' {
				k := small()
				err = j.str(k)
				resp.matchedStop = k.text().head
				return err
			}
			return j.skip(nil)
		}
		return j.skip(nil)
	})
}

// metaLogprobs reads meta_info's output_token_logprobs, [[logprob, token id, text],
// ...], keeping each entry's logprob.
func (j *jsonReader) metaLogprobs(resp *chatResponse) error {
	if ok, err := j.nextIs('['); !ok {
		return err
	}
	resp.logprobs.present = true
	return j.array(func(int) error {
		if ok, err := j.nextIs('['); !ok {
			return err
		}
		return j.array(func(i int) error {
			if i != 0 {
				return j.skip(nil)
			}
			return j.numberOr(func(lit string) { resp.logprobs.add(lit, resp.logprobs.n) })
		})
	})
}
