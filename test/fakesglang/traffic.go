package fakesglang

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
)

// Modes that break one way of asking only, as real SGLang/FlashInfer/kernel bugs have.
const (
	// ModeSampling answers garbage to a sampled request (temperature above 0, which an
	// omitted temperature is, top_p below 1 or top_k above 0) and well to a greedy one.
	ModeSampling Mode = "sampling"
	// ModeStreaming answers garbage when the answer is streamed (stream: true).
	ModeStreaming Mode = "streaming"
	// ModePrefixHit answers garbage to a request whose prompt hit the prefix cache for
	// more than PrefixHitAbove tokens.
	ModePrefixHit Mode = "prefix-hit"
	// ModeSecondTurn answers garbage to a conversation with more than one user turn.
	ModeSecondTurn Mode = "second-turn"
	// ModeNative answers garbage on /generate and /v1/completions, well on chat.
	ModeNative Mode = "native"
	// ModeNaNLogprobs answers right, with every logprob NaN (written null, as SGLang's
	// JSON encoder writes a NaN).
	ModeNaNLogprobs Mode = "nan-logprobs"
	// ModeZeroUsage answers right, with every usage count 0.
	ModeZeroUsage Mode = "zero-usage"
	// ModeBadJSON answers a response_format request with text that is not JSON (a broken
	// grammar backend).
	ModeBadJSON Mode = "bad-json"
	// ModeCJK answers garbage to a prompt holding CJK characters.
	ModeCJK Mode = "cjk"
	// ModeWordLoop answers a long generation well for Options.LoopAfter words, then
	// repeats one sentence until max_tokens.
	ModeWordLoop Mode = "word-loop"
	// ModeWrongUnseen answers arithmetic and the capital of France right, and other facts
	// (capitals, unit conversions) fluently wrong.
	ModeWrongUnseen Mode = "wrong-unseen"
	// ModeMemorizer answers right only the prompts in Options.Memorized, and fluently
	// wrong anything else.
	ModeMemorizer Mode = "memorizer"
	// ModeSlow answers right, SlowFactor times slower per generated token.
	ModeSlow Mode = "slow"
	// ModeKVFull answers garbage to a request that was in flight while the prompts in
	// flight held 90% or more of Options.KVTokens.
	ModeKVFull Mode = "kv-full"
)

// trafficModes are the modes above, for Modes.
var trafficModes = []Mode{ModeSampling, ModeStreaming, ModePrefixHit, ModeSecondTurn, ModeNative,
	ModeNaNLogprobs, ModeZeroUsage, ModeBadJSON, ModeCJK, ModeWordLoop, ModeWrongUnseen, ModeMemorizer, ModeSlow, ModeKVFull}

// TrafficModes lists the modes that break one way of asking only.
func TrafficModes() []Mode { return append([]Mode(nil), trafficModes...) }

// Defaults of the traffic modes.
const (
	// PrefixHitAbove is how many cached tokens make ModePrefixHit answer garbage.
	PrefixHitAbove = 32
	// DefaultLoopAfter is how many words ModeWordLoop answers well.
	DefaultLoopAfter = 300
	// SlowFactor is how many times slower per token ModeSlow is.
	SlowFactor = 20
	// DefaultSlowTokenLatency is ModeSlow's base time per token when Options.TokenLatency
	// is 0.
	DefaultSlowTokenLatency = time.Millisecond
	// historyPrompts is how many recent prompts the fake's prefix cache remembers.
	historyPrompts = 512
)

// trafficReq is what the fake reads of a request on any of its generation endpoints.
type trafficReq struct {
	endpoint string // chat, completions or generate
	// prompt is the last user message (or the raw prompt); context every message's text
	// joined, as the model sees it; users the count of user turns.
	prompt, context string
	users           int
	temperature     *float64
	topP            *float64
	topK            *int
	maxTokens       *int
	stream, usage   bool
	logprobs        bool
	schema          bool
	kwargs          map[string]any
	tools           []RequestTool
}

func (t trafficReq) sampled() bool {
	temp := 1.0 // the OpenAI protocol's and SGLang's default
	if t.temperature != nil {
		temp = *t.temperature
	}
	return temp > 0 || (t.topP != nil && *t.topP < 1) || (t.topK != nil && *t.topK > 0)
}

// parseTraffic reads a request of endpoint (SGLang's ChatCompletionRequest,
// CompletionRequest or GenerateReqInput).
func parseTraffic(endpoint string, r io.Reader) (trafficReq, error) {
	t := trafficReq{endpoint: endpoint}
	dec := json.NewDecoder(io.LimitReader(r, 8<<20))
	parse, ok := trafficParsers[endpoint]
	if !ok {
		parse = parseChat
	}
	if err := parse(dec, &t); err != nil {
		return t, err
	}
	return t, nil
}

// trafficParsers read a request of each endpoint but chat (parseChat) into t.
var trafficParsers = map[string]func(dec *json.Decoder, t *trafficReq) error{
	"generate":    parseGenerate,
	"completions": parseCompletions,
}

// parseGenerate reads a GenerateReqInput (text only).
func parseGenerate(dec *json.Decoder, t *trafficReq) error {
	var req struct {
		Text           *string `json:"text"`
		SamplingParams struct {
			MaxNewTokens *int     `json:"max_new_tokens"`
			Temperature  *float64 `json:"temperature"`
			TopP         *float64 `json:"top_p"`
			TopK         *int     `json:"top_k"`
		} `json:"sampling_params"`
		ReturnLogprob bool `json:"return_logprob"`
		Stream        bool `json:"stream"`
	}
	if err := dec.Decode(&req); err != nil {
		return err
	}
	if req.Text == nil {
		return fmt.Errorf("text is missing (input_ids are not read by the fake)")
	}
	sp := req.SamplingParams
	t.prompt, t.context, t.users = *req.Text, *req.Text, 1
	t.temperature, t.topP, t.topK, t.maxTokens = sp.Temperature, sp.TopP, sp.TopK, sp.MaxNewTokens
	if t.maxTokens == nil {
		n := 128 // SGLang's SamplingParams default
		t.maxTokens = &n
	}
	t.logprobs, t.stream = req.ReturnLogprob, req.Stream
	return nil
}

// parseCompletions reads a CompletionRequest (a string prompt only).
func parseCompletions(dec *json.Decoder, t *trafficReq) error {
	var req struct {
		Prompt        any      `json:"prompt"`
		MaxTokens     *int     `json:"max_tokens"`
		Temperature   *float64 `json:"temperature"`
		TopP          *float64 `json:"top_p"`
		TopK          *int     `json:"top_k"`
		Logprobs      *int     `json:"logprobs"`
		Stream        bool     `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := dec.Decode(&req); err != nil {
		return err
	}
	p, ok := req.Prompt.(string)
	if !ok {
		return fmt.Errorf("prompt: the fake reads a string prompt only")
	}
	t.prompt, t.context, t.users = p, p, 1
	t.temperature, t.topP, t.topK, t.maxTokens = req.Temperature, req.TopP, req.TopK, req.MaxTokens
	t.logprobs = req.Logprobs != nil
	t.stream, t.usage = req.Stream, req.StreamOptions.IncludeUsage
	return nil
}

// parseChat reads a ChatCompletionRequest.
func parseChat(dec *json.Decoder, t *trafficReq) error {
	var req struct {
		ChatRequest
		TopP          *float64 `json:"top_p"`
		TopK          *int     `json:"top_k"`
		Logprobs      bool     `json:"logprobs"`
		Stream        bool     `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		ResponseFormat *struct {
			Type string `json:"type"`
		} `json:"response_format"`
	}
	if err := dec.Decode(&req); err != nil {
		return err
	}
	if len(req.Messages) == 0 {
		return fmt.Errorf("messages is empty")
	}
	var all []string
	for _, m := range req.Messages {
		all = append(all, m.Content)
		if m.Role == "user" {
			t.users++
		}
	}
	t.prompt, t.context = req.Messages[len(req.Messages)-1].Content, strings.Join(all, "\n\n")
	t.temperature, t.topP, t.topK, t.maxTokens = req.Temperature, req.TopP, req.TopK, req.MaxTokens
	t.logprobs, t.stream, t.usage = req.Logprobs, req.Stream, req.StreamOptions.IncludeUsage
	t.schema = req.ResponseFormat != nil && (req.ResponseFormat.Type == "json_schema" || req.ResponseFormat.Type == "json_object")
	t.kwargs, t.tools = req.ChatTemplateKwargs, req.Tools
	return nil
}

// prefixHit returns how many leading tokens (words) of context an earlier prompt shares,
// and remembers context: the fake's radix cache.
func (s *Server) prefixHit(context string) int {
	words := strings.Fields(context)
	s.mu.Lock()
	defer s.mu.Unlock()
	best := 0
	for _, h := range s.history {
		n := 0
		for n < len(h) && n < len(words) && h[n] == words[n] {
			n++
		}
		best = max(best, n)
	}
	// SGLang never serves a whole prompt from the cache: its last token is computed.
	best = min(best, max(len(words)-1, 0))
	s.history = append(s.history, words)
	if len(s.history) > historyPrompts {
		s.history = s.history[1:]
	}
	if len(s.prompts) < 100000 {
		s.prompts = append(s.prompts, context)
	}
	return best
}

// Prompts returns every prompt the server was asked (each conversation's texts joined),
// in order: what a memorizer would learn.
func (s *Server) Prompts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.prompts...)
}

func hasCJK(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}

// generate serves /v1/chat/completions, /v1/completions and /generate.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, endpoint string) {
	t, err := parseTraffic(endpoint, r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid request: "+err.Error())
		return
	}
	switch s.opts.Mode {
	case ModeHang:
		<-r.Context().Done()
		return
	case ModeHTTP500:
		writeError(w, http.StatusInternalServerError, "Internal server error")
		return
	}
	tokens := Tokens(t.context)
	cached := s.prefixHit(t.context)
	batch, ok := s.batched(r, tokens)
	if !ok {
		return
	}
	garbage := s.garbage(t, tokens, cached, batch)
	g := s.newGeneration(t, tokens, cached, garbage)
	if t.stream && endpoint != "generate" {
		g.writeStream(w, r)
		return
	}
	content, reasoning := deref(g.msg.Content), deref(g.msg.ReasoningContent)
	if !g.wait(r, time.Duration(Tokens(content)+Tokens(reasoning))*g.perToken) {
		return
	}
	g.writeWhole(w)
}

// batched holds a request of tokens in a batching window: requests that arrive together
// are in flight together, and the answer depends on the largest batch the request was
// part of. It reports false when the request went away while it waited.
func (s *Server) batched(r *http.Request, tokens int) (flight, bool) {
	seen := s.enter(tokens)
	if s.opts.Latency > 0 {
		tm := time.NewTimer(s.opts.Latency)
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			s.leave(seen)
			return flight{}, false
		}
	}
	return s.leave(seen), true
}

// garbage returns the garbage the server's mode answers request t with (of tokens, with
// cached tokens from the prefix cache, in batch), or "" for a good answer.
func (s *Server) garbage(t trafficReq, tokens, cached int, batch flight) Mode {
	switch m := s.opts.Mode; {
	case m == ModeCrowded && batch.seen > s.opts.CrowdedAbove:
		return ModeCommaBang
	case m == ModeLongContext && tokens > s.opts.LongAbove:
		return ModeBang
	case m == ModeMixedBatch && batch.longest-batch.shortest > s.opts.MixedSpread:
		return ModeCommaBang
	case m == ModeSampling && t.sampled(),
		m == ModeStreaming && t.stream,
		m == ModePrefixHit && cached > PrefixHitAbove,
		m == ModeSecondTurn && t.users > 1,
		m == ModeNative && t.endpoint != "chat",
		m == ModeCJK && hasCJK(t.context),
		m == ModeKVFull && s.opts.KVTokens > 0 && float64(batch.held) >= 0.9*float64(s.opts.KVTokens):
		return ModeCommaBang
	}
	return ""
}

// newGeneration answers request t (of tokens, cached from the prefix cache) and returns
// the answer ready to go out, with its id, usage and time per token.
func (s *Server) newGeneration(t trafficReq, tokens, cached int, garbage Mode) generation {
	maxTokens := 128
	if t.maxTokens != nil && *t.maxTokens > 0 {
		maxTokens = min(*t.maxTokens, 4096)
	}
	thinking := t.endpoint == "chat"
	if v, ok := t.kwargs["enable_thinking"].(bool); ok {
		thinking = thinking && v
	}
	msg, finish, stop := s.answer(t.prompt, maxTokens, thinking, t.tools, garbage, t)
	msg.Role = "assistant"
	content, reasoning := deref(msg.Content), deref(msg.ReasoningContent)
	completion := max(Tokens(content)+Tokens(reasoning), 1)
	promptTokens := max(tokens, 1)
	if s.opts.Mode == ModeZeroUsage {
		completion, promptTokens = 0, 0
	}
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("%032x", s.seq)
	s.mu.Unlock()
	perToken := s.opts.TokenLatency
	if s.opts.Mode == ModeSlow {
		perToken = SlowFactor * max(perToken, DefaultSlowTokenLatency)
	}
	g := generation{s: s, id: id, t: t, msg: msg, finish: deref(finish), stop: stop,
		prompt: promptTokens, completion: completion, cached: cached, perToken: perToken}
	if s.opts.Mode == ModeZeroUsage {
		g.cached = 0
	}
	return g
}

// metrics serves SGLang's Prometheus gauge of the KV pool (with --enable-metrics, here
// Options.KVTokens set): sglang:token_usage, the share of the pool the prompts in flight
// hold. 404 without it.
func (s *Server) metrics(w http.ResponseWriter) {
	if s.opts.KVTokens <= 0 {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	s.mu.Lock()
	held := 0
	for f := range s.active {
		held += f.tokens
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP sglang:token_usage The token usage.\n# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=%q} %g\n",
		s.opts.Model, min(float64(held)/float64(s.opts.KVTokens), 1))
}
