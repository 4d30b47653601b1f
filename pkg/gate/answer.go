// Decoding a chat answer as it is read: the body bounded in bytes, the chat response's
// choice, message and texts kept as the verdict needs them, a value of the wrong type
// named.

package gate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

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
	// usage is the answer's token counts, when it carried them; logprobs what its
	// logprobs held (see answer_traffic.go).
	usage    *usage
	logprobs logprobStats
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
		switch key {
		case "usage":
			return j.usage(resp)
		case "text":
			// /generate: the generated text at the top.
			return j.textField("text", &resp.content, resp)
		case "meta_info":
			resp.choices = max(resp.choices, 1)
			return j.metaInfo(resp)
		}
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
		case "delta":
			// A chunk of a streamed chat answer: the same fields, in pieces.
			return j.object(func(key string) error {
				switch key {
				case "content":
					return j.textField("delta.content", &resp.content, resp)
				case "reasoning_content":
					return j.textField("delta.reasoning_content", &resp.reasoning, resp)
				}
				return j.skip(nil)
			})
		case "text":
			// /v1/completions: the choice's text.
			return j.textField("choices[0].text", &resp.content, resp)
		case "logprobs":
			return j.logprobs(&resp.logprobs)
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
