// Package fakesglang is a fake SGLang server for tests: an http.Handler that speaks the
// parts of SGLang's HTTP API the smoke gate uses (/health, /health_generate, /v1/models,
// /get_model_info, /v1/chat/completions, /v1/completions, /generate) and answers well or badly depending on its mode, the way a real
// server answers depending on its kernel backends.
package fakesglang

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Mode is how the fake server behaves.
type Mode string

// Modes of the fake server.
const (
	// ModeGood answers the built-in cases and the seed's prime prompt correctly.
	ModeGood Mode = "good"
	// ModeBang answers like the seed's broken server: content null, reasoning_content "!!!!…".
	ModeBang Mode = "bang"
	// ModePlus answers "+++++…".
	ModePlus Mode = "plus"
	// ModeCommaBang answers " , , (!!!!…".
	ModeCommaBang Mode = "comma-bang"
	// ModeApostropheS answers "'s's's…".
	ModeApostropheS Mode = "apostrophe-s"
	// ModeNaN answers empty content with matched_stop "NaN happened".
	ModeNaN Mode = "nan"
	// ModeAbort answers with finish_reason "abort".
	ModeAbort Mode = "abort"
	// ModeEmpty answers with content and reasoning_content empty.
	ModeEmpty Mode = "empty"
	// ModeWrong answers fluently and wrongly ("42").
	ModeWrong Mode = "wrong"
	// ModeThinkCutoff reasons until max_tokens and never gets to the content.
	ModeThinkCutoff Mode = "think-cutoff"
	// ModeSlowReady answers 503 to health checks until ReadyAfter has passed, then as good.
	ModeSlowReady Mode = "slow-ready"
	// ModeNeverReady answers 503 to health checks forever.
	ModeNeverReady Mode = "never-ready"
	// ModeHang is ready, but chat requests never answer.
	ModeHang Mode = "hang"
	// ModeHTTP500 answers chat requests with HTTP 500.
	ModeHTTP500 Mode = "http500"
	// ModeCrash makes the binary exit 1 right after it starts (the handler answers as good).
	ModeCrash Mode = "crash"
	// ModeCrashAfter makes the binary exit 1 after a while ("crash-after=DUR").
	ModeCrashAfter Mode = "crash-after"
	// ModeCrowded answers as good while few requests run, and garbage (" , , (!!!!…")
	// once more than Options.CrowdedAbove are in flight, as FlashInfer's SM120 CUTLASS FP4
	// GEMM did with 64 requests at once (flashinfer#2708).
	ModeCrowded Mode = "crowded"
	// ModeRawToolCalls answers as good, but leaves tool calls as raw <tool_call> text in
	// the content, as a server with a wrong --tool-call-parser or chat template does.
	ModeRawToolCalls Mode = "raw-tool-calls"
	// ModeInlineThink answers as good, but leaves the thinking inline in the content
	// between <think> tags, as a server with a wrong --reasoning-parser does.
	ModeInlineThink Mode = "inline-think"
	// ModeFluentWrong answers the gate's fixed prompts right and a third of other
	// questions slightly wrong, as a kernel that is a little off does.
	ModeFluentWrong Mode = "fluent-wrong"
	// ModeLongContext answers as good, and garbage ("!!!!" in reasoning_content, as the
	// seed's server) to a prompt of more than Options.LongAbove tokens: a kernel path taken
	// only once a prompt is prefilled in more than one chunk.
	ModeLongContext Mode = "long-context"
	// ModeMixedBatch answers as good, and garbage (" , , (!!!!…") to a request that was in
	// flight together with one whose prompt differs from its own by more than
	// Options.MixedSpread tokens: a kernel that breaks only on batches mixing prefill
	// lengths, as sglang#20047's NaN did.
	ModeMixedBatch Mode = "mixed-batch"
)

// Modes lists every mode, for usage messages and tests.
func Modes() []Mode {
	return append([]Mode{ModeGood, ModeBang, ModePlus, ModeCommaBang, ModeApostropheS, ModeNaN, ModeAbort,
		ModeEmpty, ModeWrong, ModeThinkCutoff, ModeSlowReady, ModeNeverReady, ModeHang, ModeHTTP500,
		ModeCrash, ModeCrashAfter, ModeCrowded, ModeRawToolCalls, ModeInlineThink, ModeFluentWrong,
		ModeLongContext, ModeMixedBatch}, trafficModes...)
}

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool {
	for _, k := range Modes() {
		if m == k {
			return true
		}
	}
	return false
}

// EOSTokenID is the stop token id good answers report as matched_stop (an int, as SGLang
// reports it when generation ends on the EOS token).
const EOSTokenID = 151645

// DefaultReadyAfter is how long ModeSlowReady stays unready when Options.ReadyAfter is 0.
const DefaultReadyAfter = 2 * time.Second

// DefaultContextLength is the max_model_len /v1/models reports when Options.ContextLength
// is 0 (SGLang reads it from the model's config).
const DefaultContextLength = 262144

// DefaultCrowdedAbove is how many requests in flight ModeCrowded still answers well.
const DefaultCrowdedAbove = 32

// DefaultLongAbove is the prompt length (tokens) above which ModeLongContext answers
// garbage when Options.LongAbove is 0: SGLang's chunked_prefill_size on 90-160 GiB GPUs.
const DefaultLongAbove = 8192

// DefaultMixedSpread is how far apart (tokens) the prompts in flight together may be
// before ModeMixedBatch answers garbage, when Options.MixedSpread is 0.
const DefaultMixedSpread = 256

// DefaultCrowdedLatency is how long ModeCrowded holds each request when Options.Latency
// is 0: a batching window, so that requests sent together are in flight together.
const DefaultCrowdedLatency = 40 * time.Millisecond

// Options configure a Server.
type Options struct {
	// Mode is the behaviour (default ModeGood).
	Mode Mode
	// Model is the served model name /v1/models reports (default: ModelPath, as SGLang's
	// --served-model-name defaults to --model-path).
	Model string
	// ModelPath is the model the server loaded (--model-path), which /get_model_info
	// reports (default "default").
	ModelPath string
	// ContextLength is max_model_len in /v1/models (default DefaultContextLength).
	ContextLength int
	// NoModelInfo makes /get_model_info answer 404, as a server that is not SGLang does.
	NoModelInfo bool
	// ReadyAfter is how long health checks answer 503 after the server was created, in
	// any mode (ModeSlowReady without it waits DefaultReadyAfter).
	ReadyAfter time.Duration
	// NoHealthGenerate makes /health_generate answer 404, as older servers do.
	NoHealthGenerate bool
	// RawToolCalls leaves tool calls as raw <tool_call> text in the content (no
	// --tool-call-parser qwen3_coder); InlineThink leaves the thinking inline in the
	// content (no --reasoning-parser qwen3).
	RawToolCalls, InlineThink bool
	// CrowdedAbove is how many requests in flight ModeCrowded still answers well
	// (default DefaultCrowdedAbove).
	CrowdedAbove int
	// LongAbove is the prompt length in tokens above which ModeLongContext answers garbage
	// (default DefaultLongAbove; the binary takes --chunked-prefill-size).
	LongAbove int
	// MixedSpread is how far apart in tokens prompts in flight together may be before
	// ModeMixedBatch answers garbage (default DefaultMixedSpread).
	MixedSpread int
	// Latency is how long each chat request is held before it is answered.
	Latency time.Duration
	// BrokenWhile names a file: while it exists, chat answers are those of BrokenMode
	// (checked at every request), as a server whose cause of garbage is on disk.
	BrokenWhile string
	// BrokenMode is what BrokenWhile makes the server do (default ModeBang).
	BrokenMode Mode
	// AnswerBytes, when set, pads each text answer with fluent filler (made-up words in
	// sentences, nothing repeated) to this many bytes: a valid answer of any size, for
	// measuring what large answers cost the client.
	AnswerBytes int
	// ServerArgs is what /server_info (and its deprecated alias /get_server_info)
	// reports: the launch line's flags by SGLang's ServerArgs field names (ServerArgsOf);
	// nil: it answers 404.
	ServerArgs map[string]any
	// CacheReport reports prefix-cache hits in usage.prompt_tokens_details.cached_tokens,
	// as SGLang does with --enable-cache-report (/generate's meta_info always has them).
	CacheReport bool
	// TokenLatency is how long each generated token takes (streamed: between chunks).
	TokenLatency time.Duration
	// LoopAfter is how many words ModeWordLoop answers well (default DefaultLoopAfter).
	LoopAfter int
	// Memorized are the prompts ModeMemorizer answers right (each conversation's texts
	// joined by a blank line, as Prompts returns them).
	Memorized map[string]bool
	// KVTokens is the KV pool's size in tokens: /metrics serves sglang:token_usage, the
	// share the prompts in flight hold (0: /metrics answers 404, as without
	// --enable-metrics).
	KVTokens int
	// Log, when set, receives one line per request.
	Log io.Writer
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Server is the fake's http.Handler.
type Server struct {
	opts  Options
	start time.Time
	mu    sync.Mutex
	seq   int
	// active holds, for each chat request in flight, what it has seen in flight with it;
	// peak is the most requests ever.
	active map[*flight]struct{}
	peak   int
	// filler is the padding of AnswerBytes, made once.
	fillerOnce sync.Once
	filler     string
	// history are the recent prompts' words (the prefix cache); prompts every prompt.
	history [][]string
	prompts []string
}

// New returns a fake server.
func New(opts Options) *Server {
	if opts.Mode == "" {
		opts.Mode = ModeGood
	}
	if opts.ModelPath == "" {
		opts.ModelPath = "default"
	}
	if opts.Model == "" {
		opts.Model = opts.ModelPath
	}
	if opts.ContextLength <= 0 {
		opts.ContextLength = DefaultContextLength
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	switch opts.Mode {
	case ModeCrowded:
		if opts.CrowdedAbove <= 0 {
			opts.CrowdedAbove = DefaultCrowdedAbove
		}
		if opts.Latency <= 0 {
			opts.Latency = DefaultCrowdedLatency
		}
	case ModeMixedBatch:
		if opts.Latency <= 0 {
			opts.Latency = DefaultCrowdedLatency
		}
	case ModeRawToolCalls:
		opts.RawToolCalls = true
	case ModeInlineThink:
		opts.InlineThink = true
	}
	if opts.LongAbove <= 0 {
		opts.LongAbove = DefaultLongAbove
	}
	if opts.MixedSpread <= 0 {
		opts.MixedSpread = DefaultMixedSpread
	}
	if opts.LoopAfter <= 0 {
		opts.LoopAfter = DefaultLoopAfter
	}
	return &Server{opts: opts, start: opts.Now(), active: map[*flight]struct{}{}}
}

// Peak returns the most chat requests that were in flight at once.
func (s *Server) Peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// flight is what a chat request in flight has seen in flight with it (itself included):
// the most requests at any moment of its life (a batch it was part of), and the shortest
// and longest prompts, in tokens.
type flight struct {
	seen, shortest, longest int
	// tokens is the request's own prompt; held the most prompt tokens in flight at once
	// during its life (the KV pool it shared).
	tokens, held int
}

// enter counts a chat request with a prompt of tokens in.
func (s *Server) enter(tokens int) *flight {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &flight{shortest: tokens, longest: tokens, tokens: tokens}
	s.active[f] = struct{}{}
	n := len(s.active)
	held := 0
	for r := range s.active {
		held += r.tokens
	}
	for r := range s.active {
		r.held = max(r.held, held)
		r.seen = max(r.seen, n)
		r.shortest, r.longest = min(r.shortest, tokens), max(r.longest, tokens)
		f.shortest, f.longest = min(f.shortest, r.shortest), max(f.longest, r.longest)
	}
	s.peak = max(s.peak, n)
	return f
}

// leave counts a chat request out and returns what it saw in flight.
func (s *Server) leave(f *flight) flight {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, f)
	return *f
}

// Tokens is how the fake counts a prompt's tokens: its words (a real server's tokenizer
// counts about one token per common English word, more for numbers and rare words).
func Tokens(prompt string) int { return len(strings.Fields(prompt)) }

// Ready reports whether health checks answer 200 now.
func (s *Server) Ready() bool {
	switch s.opts.Mode {
	case ModeNeverReady:
		return false
	}
	after := s.opts.ReadyAfter
	if after == 0 && s.opts.Mode == ModeSlowReady {
		after = DefaultReadyAfter
	}
	return s.opts.Now().Sub(s.start) >= after
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush sends what was written so far (a streamed answer's chunks, as they are made).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ServeHTTP serves the fake API and logs one line per request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	s.route(sw, r)
	if s.opts.Log != nil {
		fmt.Fprintf(s.opts.Log, "fake-sglang: %s %s %d %s mode=%s\n", r.Method, r.URL.Path, sw.code,
			time.Since(begin).Round(time.Microsecond), s.opts.Mode)
	}
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		s.health(w)
	case "/health_generate":
		if s.opts.NoHealthGenerate {
			http.NotFound(w, r)
			return
		}
		s.health(w)
	case "/v1/models":
		// SGLang's ModelList of one ModelCard: the served model name, created at the time
		// of the request, and the context length.
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list",
			"data": []map[string]any{{"id": s.opts.Model, "object": "model",
				"created": s.opts.Now().Unix(), "owned_by": "sglang", "root": s.opts.Model,
				"max_model_len": s.opts.ContextLength}},
		})
	case "/get_model_info":
		if s.opts.NoModelInfo {
			writeError(w, http.StatusNotFound, "Not Found")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"model_path": s.opts.ModelPath, "tokenizer_path": s.opts.ModelPath,
			"is_generation": true, "preferred_sampling_params": nil, "weight_version": "default",
		})
	case "/metrics":
		s.metrics(w)
	case "/server_info", "/get_server_info":
		// /get_server_info is SGLang's deprecated alias of /server_info.
		if s.opts.ServerArgs == nil {
			writeError(w, http.StatusNotFound, "Not Found")
			return
		}
		writeJSON(w, http.StatusOK, s.opts.ServerArgs)
	case "/v1/chat/completions":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		s.generate(w, r, "chat")
	case "/v1/completions", "/generate":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		s.generate(w, r, strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/v1"), "/"))
	default:
		writeError(w, http.StatusNotFound, "Not Found")
	}
}

func (s *Server) health(w http.ResponseWriter) {
	if !s.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"object": "error", "message": msg,
		"type": http.StatusText(code), "param": nil, "code": code})
}

// ChatRequest is the part of an OpenAI chat request the fake reads.
type ChatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Temperature        *float64       `json:"temperature"`
	MaxTokens          *int           `json:"max_tokens"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
	Tools              []RequestTool  `json:"tools"`
}

// RequestTool is an OpenAI function tool of a request.
type RequestTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

// ToolCall is an OpenAI tool call of an answer.
type ToolCall struct {
	ID       string `json:"id"`
	Index    int    `json:"index"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Message is SGLang's ChatMessage.
type Message struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content"`
	ToolCalls        []ToolCall `json:"tool_calls"`
}

// Choice is SGLang's ChatCompletionResponseChoice.
type Choice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	// MatchedStop is a string, an int or null.
	MatchedStop any `json:"matched_stop"`
}

// Usage is SGLang's UsageInfo.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	ReasoningTokens  int `json:"reasoning_tokens"`
}

// ChatResponse is SGLang's ChatCompletionResponse.
type ChatResponse struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   Usage    `json:"usage"`
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
