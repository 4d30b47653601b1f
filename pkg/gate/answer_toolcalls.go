// Decoding an answer's tool_calls: each call's name and its arguments string, bounded in
// number and size, and what is wrong with them said as the OpenAI protocol defines them.

package gate

import "fmt"

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
		return j.toolCall(resp, fail)
	})
	return err
}

// toolCall reads one call object of a tool_calls list into resp.calls; fail records what
// is wrong with it.
func (j *jsonReader) toolCall(resp *chatResponse, fail func(msg string)) error {
	var call ToolCall
	var argsKind byte
	var argsRaw text
	err := j.object(func(key string) error {
		if key != "function" {
			return j.skip(nil)
		}
		if ok, err := j.nextIs('{'); !ok {
			return err
		}
		return j.function(resp, &call, &argsKind, &argsRaw)
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
}

// function reads a call's function object: its name into call, its arguments' JSON kind
// and text into argsKind and argsRaw.
func (j *jsonReader) function(resp *chatResponse, call *ToolCall, argsKind *byte, argsRaw *text) error {
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
			*argsKind = c
			if c == '"' {
				k := &keeper{headMax: MaxArgumentsBytes}
				err = j.str(k)
				*argsRaw = k.text()
				return err
			}
			k := small()
			err = j.skip(k)
			*argsRaw = k.text()
			return err
		}
		return j.skip(nil)
	})
}
