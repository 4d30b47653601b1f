// Package fakesglang is a fake SGLang server for tests: an http.Handler that speaks the
// parts of SGLang's HTTP API the smoke gate uses (/health, /health_generate, /v1/models,
// /get_model_info, /v1/chat/completions, /v1/completions, /generate) and answers well or badly depending on its mode, the way a real
// server answers depending on its kernel backends.
package fakesglang

import (
	"fmt"
	"os"
	"strings"
)

// answer returns the message, finish_reason and matched_stop for prompt in the server's mode.
// garbage, when set, is the broken mode the request's batch or length calls for.
func (s *Server) answer(prompt string, maxTokens int, thinking bool, tools []RequestTool, garbage Mode, t trafficReq) (Message, *string, any) {
	mode := s.answerMode(garbage)
	if broken, ok := brokenAnswers[mode]; ok {
		return broken(maxTokens)
	}
	var m Message
	finish := ptr("stop")
	var matched any = EOSTokenID
	var content string
	if call, ok := pickToolCall(prompt, tools); ok {
		if s.opts.RawToolCalls {
			content = call.raw()
		} else {
			m.ToolCalls = []ToolCall{s.toolCall(call)}
			finish, matched = ptr("tool_calls"), nil
		}
	} else {
		content, finish, matched = s.textAnswer(prompt, maxTokens, mode, t)
	}
	if content != "" {
		m.Content = ptr(content)
	}
	if thinking {
		thought := "The user asks: " + firstLine(prompt) + " I will answer briefly."
		if s.opts.InlineThink {
			m.Content = ptr("<think>\n" + thought + "\n</think>\n\n" + content)
		} else {
			m.ReasoningContent = ptr(thought)
		}
	}
	return m, finish, matched
}

// answerMode is the mode a request is answered in: garbage when set, else the server's;
// the broken mode (bang unless set) while --fake-broken-while's file exists.
func (s *Server) answerMode(garbage Mode) Mode {
	mode := s.opts.Mode
	if garbage != "" {
		mode = garbage
	}
	if s.opts.BrokenWhile != "" {
		if _, err := os.Stat(s.opts.BrokenWhile); err == nil {
			mode = s.opts.BrokenMode
			if mode == "" || mode == ModeGood {
				mode = ModeBang
			}
		}
	}
	return mode
}

// brokenAnswers answer in each mode whose answer does not depend on the question: the
// message, finish_reason and matched_stop for max_tokens n.
var brokenAnswers = map[Mode]func(n int) (Message, *string, any){
	ModeBang: func(n int) (Message, *string, any) {
		return Message{Content: nil, ReasoningContent: ptr(strings.Repeat("!", n))}, ptr("length"), nil
	},
	ModePlus: func(n int) (Message, *string, any) {
		return Message{Content: ptr(strings.Repeat("+", n))}, ptr("length"), nil
	},
	ModeCommaBang: func(n int) (Message, *string, any) {
		return Message{Content: ptr(" , , (" + strings.Repeat("!", max(n-3, 1)))}, ptr("length"), nil
	},
	ModeApostropheS: func(n int) (Message, *string, any) {
		return Message{Content: ptr(strings.Repeat("'s", n))}, ptr("length"), nil
	},
	ModeNaN: func(int) (Message, *string, any) {
		return Message{Content: ptr("")}, ptr("stop"), "NaN happened"
	},
	ModeAbort: func(int) (Message, *string, any) {
		return Message{Content: ptr("")}, ptr("abort"), nil
	},
	ModeEmpty: func(int) (Message, *string, any) {
		return Message{Content: ptr("")}, ptr("stop"), EOSTokenID
	},
	ModeWrong: func(int) (Message, *string, any) {
		return Message{Content: ptr("42")}, ptr("stop"), EOSTokenID
	},
	ModeThinkCutoff: func(int) (Message, *string, any) {
		return Message{ReasoningContent: ptr("Okay, the user is asking a question. Let me think about it carefully, step by step, before I write the answer.")}, ptr("length"), nil
	},
}

// toolCall is c as a parsed tool call of the answer, with an id of its own.
func (s *Server) toolCall(c call) ToolCall {
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("call_%024x", s.seq)
	s.mu.Unlock()
	tc := ToolCall{ID: id, Type: "function"}
	tc.Function.Name, tc.Function.Arguments = c.name, c.json()
	return tc
}

// textAnswer returns the text answer to prompt in mode (cut at maxTokens words, as JSON
// when the request asks a schema, padded to --fake-answer-bytes) with its finish_reason
// and matched_stop.
func (s *Server) textAnswer(prompt string, maxTokens int, mode Mode, t trafficReq) (string, *string, any) {
	finish := ptr("stop")
	var matched any = EOSTokenID
	content := GoodAnswer(t.context)
	switch {
	case mode == ModeFluentWrong:
		content = fluentWrong(prompt, content)
	case mode == ModeWrongUnseen && unseenFact(t.context),
		mode == ModeMemorizer && !s.memorized(t.context):
		content = wrongly(content)
	case mode == ModeWordLoop && storyAsk.MatchString(prompt):
		content = loopText(content, s.opts.LoopAfter, maxTokens)
	}
	if words := strings.Fields(content); len(words) > maxTokens {
		content, finish, matched = strings.Join(words[:maxTokens], " "), ptr("length"), nil
	}
	if t.schema {
		content = jsonAnswer(t.context, content)
		if mode == ModeBadJSON {
			content = strings.TrimSuffix(content, "}") + `, "note": "`
		}
	}
	if n := s.opts.AnswerBytes - len(content) - 1; n > 0 {
		s.fillerOnce.Do(func() { s.filler = Filler(s.opts.AnswerBytes) })
		content += " " + s.filler[:n]
	}
	return content, finish, matched
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
