package fakesglang

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// generation is one answer on its way out.
type generation struct {
	s                          *Server
	id                         string
	t                          trafficReq
	msg                        Message
	finish                     string
	stop                       any
	prompt, completion, cached int
	perToken                   time.Duration
}

func (g generation) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// usage is SGLang's UsageInfo, prompt_tokens_details only with --enable-cache-report.
func (g generation) usage() map[string]any {
	u := map[string]any{"prompt_tokens": g.prompt, "completion_tokens": g.completion,
		"total_tokens": g.prompt + g.completion, "prompt_tokens_details": nil, "reasoning_tokens": 0}
	if g.s.opts.CacheReport {
		u["prompt_tokens_details"] = map[string]any{"cached_tokens": g.cached}
	}
	return u
}

// logprob is a token's logprob: a small negative number, or null (NaN) in ModeNaNLogprobs.
func (g generation) logprob(i int) any {
	if g.s.opts.Mode == ModeNaNLogprobs {
		return nil
	}
	return -0.01 - float64(i%7)*0.05
}

func (g generation) chatLogprobs(words []string, from int) any {
	if !g.t.logprobs {
		return nil
	}
	content := make([]map[string]any, len(words))
	for i, w := range words {
		content[i] = map[string]any{"token": w, "logprob": g.logprob(from + i), "bytes": nil, "top_logprobs": []any{}}
	}
	return map[string]any{"content": content}
}

func (g generation) completionLogprobs(words []string, from int) any {
	if !g.t.logprobs {
		return nil
	}
	lps := make([]any, len(words))
	for i := range words {
		lps[i] = g.logprob(from + i)
	}
	return map[string]any{"tokens": words, "token_logprobs": lps, "top_logprobs": nil, "text_offset": nil}
}

// tokensOf splits a text into the fake's tokens: words with the space before them.
func tokensOf(s string) []string {
	var out []string
	start := 0
	for i := 1; i < len(s); i++ {
		if s[i] == ' ' || s[i] == '\n' {
			out = append(out, s[start:i])
			start = i
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func (g generation) writeWhole(w http.ResponseWriter) {
	s := g.s
	content := deref(g.msg.Content)
	now := s.opts.Now().Unix()
	switch g.t.endpoint {
	case "generate":
		meta := map[string]any{"id": g.id, "finish_reason": map[string]any{"type": g.finish, "matched": g.stop},
			"prompt_tokens": g.prompt, "completion_tokens": g.completion, "cached_tokens": g.cached,
			"weight_version": "default", "e2e_latency": 0.01}
		if g.t.logprobs {
			toks := tokensOf(content)
			lps := make([]any, len(toks))
			for i := range toks {
				lps[i] = []any{g.logprob(i), 1000 + i, nil}
			}
			meta["output_token_logprobs"] = lps
		}
		writeJSON(w, http.StatusOK, map[string]any{"text": content, "meta_info": meta})
	case "completions":
		writeJSON(w, http.StatusOK, map[string]any{"id": g.id, "object": "text_completion", "created": now,
			"model": s.opts.Model, "choices": []any{map[string]any{"index": 0, "text": content,
				"logprobs": g.completionLogprobs(tokensOf(content), 0), "finish_reason": g.finish, "matched_stop": g.stop}},
			"usage": g.usage()})
	default:
		fin := g.finish
		writeJSON(w, http.StatusOK, map[string]any{"id": g.id, "object": "chat.completion", "created": now,
			"model": s.opts.Model, "choices": []any{map[string]any{"index": 0, "message": g.msg,
				"logprobs": g.chatLogprobs(tokensOf(content), 0), "finish_reason": &fin, "matched_stop": g.stop}},
			"usage": g.usage()})
	}
}

// writeStream writes the answer as SGLang streams it: a first chunk with the role, one
// chunk per token, a final chunk with finish_reason, a usage chunk when asked, [DONE].
func (g generation) writeStream(w http.ResponseWriter, r *http.Request) {
	s := g.s
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	now := s.opts.Now().Unix()
	object := "chat.completion.chunk"
	if g.t.endpoint == "completions" {
		object = "text_completion"
	}
	send := func(choices []any, usage any) {
		chunk := map[string]any{"id": g.id, "object": object, "created": now, "model": s.opts.Model, "choices": choices}
		if usage != nil {
			chunk["usage"] = usage
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	piece := func(field, text string, i int) map[string]any {
		if g.t.endpoint == "completions" {
			return map[string]any{"index": 0, "text": text, "logprobs": g.completionLogprobs([]string{text}, i), "finish_reason": nil}
		}
		return map[string]any{"index": 0, "delta": map[string]any{field: text},
			"logprobs": g.chatLogprobs([]string{text}, i), "finish_reason": nil}
	}
	if g.t.endpoint == "chat" {
		send([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "finish_reason": nil}}, nil)
	}
	i := 0
	for _, part := range []struct{ field, text string }{{"reasoning_content", deref(g.msg.ReasoningContent)}, {"content", deref(g.msg.Content)}} {
		for _, tok := range tokensOf(part.text) {
			if !g.wait(r, g.perToken) {
				return
			}
			send([]any{piece(part.field, tok, i)}, nil)
			i++
		}
	}
	if len(g.msg.ToolCalls) > 0 {
		send([]any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": g.msg.ToolCalls}, "finish_reason": nil}}, nil)
	}
	final := map[string]any{"index": 0, "finish_reason": g.finish, "matched_stop": g.stop}
	if g.t.endpoint == "completions" {
		final["text"] = ""
	} else {
		final["delta"] = map[string]any{}
	}
	send([]any{final}, nil)
	if g.t.usage {
		send([]any{}, g.usage())
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}
