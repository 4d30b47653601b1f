package gate

import (
	"fmt"
	"regexp"
	"strings"
)

// Texts in content that show the server did not parse what it should have.
var (
	rawToolCall = regexp.MustCompile(`<tool_call>|</tool_call>|<function=[^>\s]*>`)
	thinkTag    = regexp.MustCompile(`</?think>`)
)

// judge fills a's verdict from a decoded answer.
func judge(a *answer, resp chatResponse, r request) {
	if msg := shapeFault(resp); msg != "" {
		a.reason = msg
		return
	}
	a.finish = resp.finish
	a.toolCalls = resp.calls
	a.sample = answerSample(resp)
	for _, check := range answerChecks {
		if msg := check(resp, r); msg != "" {
			a.reason = msg
			return
		}
	}
	if r.expect.ToolCall != nil {
		if msg := unmetCall(resp, r.expect); msg != "" {
			a.reason = msg
			return
		}
		a.pass, a.reason = true, "ok"
		return
	}
	if msg := unmetText(resp, r.expect); msg != "" {
		a.reason = msg
		return
	}
	a.pass, a.reason = true, "ok"
	if r.accept != nil {
		content := resp.content
		a.right = HasAnswer(content.head, r.accept) || (content.tail != "" && HasAnswer(content.tail, r.accept))
	}
}

// answerChecks are the checks every answer of a well-shaped response passes, in order;
// each returns why the answer fails, or "".
var answerChecks = []func(chatResponse, request) string{
	serverFault,
	degenerateText,
	degenerateCalls,
	judgeTraffic,
	rawCallFault,
}

// shapeFault returns why the response is not an answer at all, or "".
func shapeFault(resp chatResponse) string {
	if resp.shapeErr != "" {
		return resp.shapeErr
	}
	if resp.choices == 0 {
		return "answer has no choices"
	}
	return ""
}

// answerSample is the sample an answer shows: its content, else its first tool call,
// else its reasoning.
func answerSample(resp chatResponse) string {
	switch {
	case !resp.content.blank():
		return Sample(resp.content.head, SampleRunes)
	case len(resp.calls) > 0:
		return Sample(resp.calls[0].String(), SampleRunes)
	default:
		return Sample(resp.reasoning.head, SampleRunes)
	}
}

// serverFault returns what the server reported going wrong (an abort, NaN logits, a
// tool call it could not parse), or "".
func serverFault(resp chatResponse, _ request) string {
	if resp.finish == "abort" {
		return "finish_reason abort: the server aborted the request"
	}
	if resp.matchedStop == NaNStop {
		return `matched_stop "NaN happened": the model produced NaN logits`
	}
	return resp.callErr
}

// degenerateText returns the first degeneration found in the content or the
// reasoning, or "".
func degenerateText(resp chatResponse, _ request) string {
	for _, f := range []struct {
		name string
		text text
	}{{"content", resp.content}, {"reasoning_content", resp.reasoning}} {
		for _, part := range f.text.parts() {
			if d := Detect(part); d != nil {
				return fmt.Sprintf("degenerate %s (%s): %s", f.name, d.Detector, d.Detail)
			}
		}
	}
	return ""
}

// degenerateCalls returns the first degeneration found in a tool call's name or
// arguments, or "".
func degenerateCalls(resp chatResponse, _ request) string {
	for _, c := range resp.calls {
		for _, f := range []struct{ name, text string }{{"name", c.Name}, {"arguments", c.Arguments}} {
			if d := Detect(f.text); d != nil {
				return fmt.Sprintf("degenerate tool call %s (%s): %s", f.name, d.Detector, d.Detail)
			}
		}
	}
	return ""
}

// rawCallFault returns why a request with tools, or expecting a tool call, failed when
// its content holds a tool call the server left unparsed, or "".
func rawCallFault(resp chatResponse, r request) string {
	if !r.tools && r.expect.ToolCall == nil {
		return ""
	}
	if m := findIn(rawToolCall, resp.content); m != "" {
		return fmt.Sprintf("tool call left as raw %s text in content, not parsed into tool_calls: check --tool-call-parser (qwen3_coder for Qwen3.5), the chat template and the model revision", m)
	}
	return ""
}

// unmetCall returns what an answer lacks of an expected tool call and of the text
// expectations beside it, or "".
func unmetCall(resp chatResponse, exp Expect) string {
	if msg := unmetToolCall(resp.calls, *exp.ToolCall); msg != "" {
		return msg
	}
	return unmet(resp.content, exp)
}

// unmetText returns what a text answer lacks: text at all, reasoning split from it
// when expected, content beside the reasoning, and exp's text expectations; or "".
func unmetText(resp chatResponse, exp Expect) string {
	content, reasoning := resp.content, resp.reasoning
	if content.blank() && reasoning.blank() {
		if len(resp.calls) > 0 {
			return "answered with a tool call instead of text"
		}
		return "empty answer: content and reasoning_content are both empty"
	}
	if exp.Reasoning {
		if m := findIn(thinkTag, content); m != "" {
			return fmt.Sprintf("think tag %s inline in content: the reasoning parser did not split the answer (check --reasoning-parser qwen3)", m)
		}
		if reasoning.blank() {
			return "reasoning_content is empty: no thinking came back split from the answer (check --reasoning-parser qwen3 and chat_template_kwargs enable_thinking: true)"
		}
	}
	if content.blank() {
		if resp.finish == "length" {
			return "answer cut off while reasoning (finish_reason length, content empty): raise max_tokens or set chat_template_kwargs enable_thinking: false"
		}
		return "content empty: the model answered only in reasoning_content"
	}
	return unmet(content, exp)
}

// findIn returns the first match of re in the kept parts of t, or "".
func findIn(re *regexp.Regexp, t text) string {
	for _, p := range t.parts() {
		if m := re.FindString(p); m != "" {
			return m
		}
	}
	return ""
}

// unmet returns what content lacks of exp's text expectations, or "". Of a text longer
// than what the gate keeps, each expectation may be met in its head or in its tail.
func unmet(content text, exp Expect) string {
	parts := content.parts()
	if exp.Regex != "" {
		re, err := regexp.Compile(exp.Regex)
		if err != nil {
			return "expect.regex: " + err.Error()
		}
		if findIn(re, content) == "" {
			return fmt.Sprintf("content does not match regex %s", exp.Regex)
		}
	}
	lower := make([]string, len(parts))
	for i, p := range parts {
		lower[i] = strings.ToLower(p)
	}
	has := func(s string) bool {
		s = strings.ToLower(s)
		for _, p := range lower {
			if strings.Contains(p, s) {
				return true
			}
		}
		return false
	}
	for _, s := range exp.Contains {
		if !has(s) {
			return fmt.Sprintf("content does not contain %q", s)
		}
	}
	if len(exp.ContainsAny) > 0 {
		found := false
		for _, s := range exp.ContainsAny {
			if has(s) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Sprintf("content contains none of %q", exp.ContainsAny)
		}
	}
	return ""
}
