package fakesglang

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"regexp"
	"strconv"
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
	switch endpoint {
	case "generate":
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
			return t, err
		}
		if req.Text == nil {
			return t, fmt.Errorf("text is missing (input_ids are not read by the fake)")
		}
		sp := req.SamplingParams
		t.prompt, t.context, t.users = *req.Text, *req.Text, 1
		t.temperature, t.topP, t.topK, t.maxTokens = sp.Temperature, sp.TopP, sp.TopK, sp.MaxNewTokens
		if t.maxTokens == nil {
			n := 128 // SGLang's SamplingParams default
			t.maxTokens = &n
		}
		t.logprobs, t.stream = req.ReturnLogprob, req.Stream
	case "completions":
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
			return t, err
		}
		p, ok := req.Prompt.(string)
		if !ok {
			return t, fmt.Errorf("prompt: the fake reads a string prompt only")
		}
		t.prompt, t.context, t.users = p, p, 1
		t.temperature, t.topP, t.topK, t.maxTokens = req.Temperature, req.TopP, req.TopK, req.MaxTokens
		t.logprobs = req.Logprobs != nil
		t.stream, t.usage = req.Stream, req.StreamOptions.IncludeUsage
	default:
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
			return t, err
		}
		if len(req.Messages) == 0 {
			return t, fmt.Errorf("messages is empty")
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
	}
	return t, nil
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
	// A batching window: requests that arrive together are in flight together, and the
	// answer depends on the largest batch the request was part of.
	seen := s.enter(tokens)
	if s.opts.Latency > 0 {
		tm := time.NewTimer(s.opts.Latency)
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			s.leave(seen)
			return
		}
	}
	batch := s.leave(seen)
	var garbage Mode
	switch m := s.opts.Mode; {
	case m == ModeCrowded && batch.seen > s.opts.CrowdedAbove:
		garbage = ModeCommaBang
	case m == ModeLongContext && tokens > s.opts.LongAbove:
		garbage = ModeBang
	case m == ModeMixedBatch && batch.longest-batch.shortest > s.opts.MixedSpread:
		garbage = ModeCommaBang
	case m == ModeSampling && t.sampled(),
		m == ModeStreaming && t.stream,
		m == ModePrefixHit && cached > PrefixHitAbove,
		m == ModeSecondTurn && t.users > 1,
		m == ModeNative && endpoint != "chat",
		m == ModeCJK && hasCJK(t.context),
		m == ModeKVFull && s.opts.KVTokens > 0 && float64(batch.held) >= 0.9*float64(s.opts.KVTokens):
		garbage = ModeCommaBang
	}
	maxTokens := 128
	if t.maxTokens != nil && *t.maxTokens > 0 {
		maxTokens = min(*t.maxTokens, 4096)
	}
	thinking := endpoint == "chat"
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
	if t.stream && endpoint != "generate" {
		g.writeStream(w, r)
		return
	}
	if !g.wait(r, time.Duration(Tokens(content)+Tokens(reasoning))*perToken) {
		return
	}
	g.writeWhole(w)
}

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

var (
	ordinalNeedle = regexp.MustCompile(`the (first|second) secret number is (\d+)\.`)
	ordinalAsk    = regexp.MustCompile(`(?i)what is the (first|second) secret number`)
	listAsk       = regexp.MustCompile(`list of numbers: ([\d, ]+)\. What is the (largest|smallest) number`)
	cjkTimes      = regexp.MustCompile(`(\d+)\s*乘以\s*(\d+)`)
	cjkCapital    = regexp.MustCompile(`(\p{Han}+)的首都`)
	storyAsk      = regexp.MustCompile(`(?i)write a story of about (\d+) words`)
	capitalAlt    = regexp.MustCompile(`(?i)capital city of (?:the )?([A-Z][A-Za-z ]*[a-z])\b|(?:[Tt]he )?([A-Z][A-Za-z ]*[a-z]) has which city as its capital`)
)

// cjkCapitals is what the fake model knows of geography in Chinese.
var cjkCapitals = map[string]string{"日本": "东京", "法国": "巴黎", "德国": "柏林", "意大利": "罗马", "英国": "伦敦",
	"俄罗斯": "莫斯科", "埃及": "开罗", "西班牙": "马德里", "韩国": "首尔", "泰国": "曼谷", "希腊": "雅典",
	"奥地利": "维也纳", "挪威": "奥斯陆", "葡萄牙": "里斯本", "芬兰": "赫尔辛基"}

// trafficAnswer knows what the other questions of the gate's generated cases ask: two
// numbers in one text, a list's largest or smallest, questions in Chinese, a story, a
// capital asked in other words.
func trafficAnswer(prompt string) (string, bool) {
	if q := ordinalAsk.FindStringSubmatch(prompt); q != nil {
		for _, m := range ordinalNeedle.FindAllStringSubmatch(prompt, -1) {
			if strings.EqualFold(m[1], q[1]) {
				return m[2], true
			}
		}
	}
	if m := listAsk.FindStringSubmatch(prompt); m != nil {
		best := 0
		for i, f := range strings.Split(m[1], ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				continue
			}
			if i == 0 || (m[2] == "largest" && n > best) || (m[2] == "smallest" && n < best) {
				best = n
			}
		}
		return strconv.Itoa(best), true
	}
	if m := cjkTimes.FindStringSubmatch(prompt); m != nil {
		a, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[2])
		return strconv.Itoa(a * b), true
	}
	if m := cjkCapital.FindStringSubmatch(prompt); m != nil {
		if c, ok := cjkCapitals[m[1]]; ok {
			return c, true
		}
	}
	if m := storyAsk.FindStringSubmatch(prompt); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Story(prompt, min(n, 4000)), true
	}
	if m := capitalAlt.FindStringSubmatch(prompt); m != nil {
		country := m[1] + m[2]
		if city, ok := capitals[strings.ToLower(country)]; ok {
			return city, true
		}
	}
	return "", false
}

// Story returns a story of about n words that reads as language to the gate's detectors:
// sentences of common words drawn from a hash of the prompt, nothing repeated.
func Story(prompt string, n int) string {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	x := h.Sum64() | 1
	next := func(k int) int {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		return int(((x * 0x2545F4914F6CDD1D) >> 33) % uint64(k))
	}
	subjects := []string{"The old keeper", "A young miller", "Her brother", "The tired fox", "A quiet girl", "The baker",
		"An old sailor", "The small dog", "Their neighbour", "The night guard", "My grandmother", "The stranger"}
	verbs := []string{"walked toward", "looked at", "remembered", "carried", "found", "painted", "followed", "waited by",
		"listened to", "cleaned", "opened", "closed", "climbed", "repaired", "forgot", "counted"}
	things := []string{"the river", "a broken lantern", "the harbour wall", "an empty basket", "the long road", "the orchard gate",
		"a letter from home", "the bell tower", "the frozen pond", "a wooden boat", "the kitchen window", "the market square",
		"a pair of boots", "the narrow bridge", "the last train", "a jar of honey"}
	tails := []string{"before the rain came", "while the town slept", "without a word", "as the sun went down", "for the third time",
		"with great care", "and smiled", "in the cold morning", "because nobody else would", "after supper", "once more", "at dawn"}
	openers := []string{"", "Later, ", "Then ", "Meanwhile ", "That evening ", "Soon ", "Once again ", "Still, ",
		"By noon ", "Quietly ", "In the end ", "Next "}
	var b strings.Builder
	words := 0
	for words < n {
		subject := subjects[next(len(subjects))]
		if o := openers[next(len(openers))]; o != "" {
			subject = o + strings.ToLower(subject[:1]) + subject[1:]
		}
		s := subject + " " + verbs[next(len(verbs))] + " " + things[next(len(things))] + " " + tails[next(len(tails))] + ". "
		if next(5) == 0 {
			s += "\n\n"
		}
		b.WriteString(s)
		words += len(strings.Fields(s))
	}
	return strings.TrimSpace(b.String())
}

// loopText is what ModeWordLoop writes: the answer's first after words, then one
// sentence over and over up to n words.
func loopText(good string, after, n int) string {
	words := strings.Fields(good)
	if len(words) > after {
		words = words[:after]
	}
	out := strings.Join(words, " ")
	for len(words) < n {
		out += " And then the keeper walked back to the river again."
		words = append(words, make([]string, 10)...)
	}
	return out
}

// memorized reports whether ModeMemorizer knows the prompt by heart.
func (s *Server) memorized(context string) bool {
	return s.opts.Memorized[context]
}

// unseenFact reports whether prompt asks a fact other than the capital of France.
func unseenFact(prompt string) bool {
	lower := strings.ToLower(prompt)
	if strings.Contains(lower, "france") || strings.Contains(prompt, "法国") {
		return false
	}
	return capital.MatchString(prompt) || capitalAlt.MatchString(prompt) || unitQ.MatchString(prompt) || cjkCapital.MatchString(prompt)
}

// wrongly returns a fluent wrong answer in right's place: a number off by one, another city.
func wrongly(right string) string {
	if n, err := strconv.Atoi(right); err == nil {
		return strconv.Itoa(n + 1)
	}
	if hasCJK(right) {
		return "日内瓦"
	}
	return "Geneva"
}

// jsonAnswer is what a grammar-constrained answer to prompt is: a capital question as
// {"country", "capital"}, anything else as {"answer"}.
func jsonAnswer(prompt, content string) string {
	var v map[string]any
	if m := capital.FindStringSubmatch(prompt); m != nil {
		v = map[string]any{"country": m[1], "capital": content}
	} else {
		v = map[string]any{"answer": content}
	}
	b, _ := json.Marshal(v)
	return string(b)
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
