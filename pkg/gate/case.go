package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Limits of a case's fields.
const (
	// MaxConcurrency is the most requests a load or accuracy case may hold at once.
	MaxConcurrency = 1024
	// DefaultMinScore is an accuracy case's threshold when it sets none.
	DefaultMinScore = 0.9
	// DefaultAccuracyConcurrency is how many questions of a sweep run at once by default.
	DefaultAccuracyConcurrency = 8
	// MissesShown is how many misses of an accuracy case the verdict lists.
	MissesShown = 5
)

// Case kinds, as CaseResult.Kind names them.
const (
	KindChat      = "chat"
	KindLoad      = "load"
	KindTool      = "tool"
	KindReasoning = "reasoning"
	KindAccuracy  = "accuracy"
	// KindLong is a needle case whose longest prompt is LongContextWords or more.
	KindLong = "long-context"
)

// Expect is what a case's answer must satisfy; every part that is set must hold.
type Expect struct {
	// Regex must match somewhere in the content (Go syntax; use (?i) for case-insensitive).
	Regex string `yaml:"regex" json:"regex,omitempty"`
	// Contains are substrings that must all appear (case-insensitive).
	Contains []string `yaml:"contains" json:"contains,omitempty"`
	// ContainsAny are substrings of which at least one must appear (case-insensitive).
	ContainsAny []string `yaml:"contains_any" json:"contains_any,omitempty"`
	// ToolCall is a call the answer must carry in tool_calls, as the server's tool-call
	// parser returns it; a call left as raw <tool_call> text in the content fails.
	ToolCall *ToolCallExpect `yaml:"tool_call" json:"tool_call,omitempty"`
	// Reasoning asks for the reasoning split: reasoning_content non-empty, and no think
	// tags in the content.
	Reasoning bool `yaml:"reasoning" json:"reasoning,omitempty"`
	// JSONSchema asks with response_format json_schema: the content must parse as JSON
	// and hold this schema (type, properties, required, items, enum, bounds).
	JSONSchema map[string]any `yaml:"json_schema" json:"json_schema,omitempty"`
	// MinWords makes the case a long generation: the content must have at least this many
	// words, and is judged for loops across the whole of it.
	MinWords int `yaml:"min_words" json:"min_words,omitempty"`
}

// ToolCallExpect is an expected tool call.
type ToolCallExpect struct {
	// Name is the function's name.
	Name string `yaml:"name" json:"name"`
	// Arguments must be a subset of the call's arguments (a JSON object): every key given
	// here must be there with an equal value; objects are compared the same way, deeply.
	Arguments map[string]any `yaml:"arguments" json:"arguments,omitempty"`
}

// Tool is an OpenAI function tool offered to the model.
type Tool struct {
	// Name is the function's name, as the model calls it.
	Name string `yaml:"name" json:"name"`
	// Description tells the model what the function does.
	Description string `yaml:"description" json:"description,omitempty"`
	// Parameters is the function's JSON schema.
	Parameters map[string]any `yaml:"parameters" json:"parameters,omitempty"`
}

// Accuracy makes a case a sweep over many questions, scored.
type Accuracy struct {
	// Questions is "builtin:NAME" (see BuiltinQuestionSets) or a JSONL file, one
	// {"prompt": ..., "answer": ...} per line.
	Questions string `yaml:"questions" json:"questions"`
	// MinScore is the share of right answers the case needs, 0 to 1 (default 0.9).
	MinScore float64 `yaml:"min_score" json:"min_score,omitempty"`
	// Concurrency is how many questions are asked at once (default 8).
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// Limit asks only the first Limit questions (0: all).
	Limit int `yaml:"limit" json:"limit,omitempty"`
}

// Case is one question of the gate, or one sweep of questions (Accuracy).
type Case struct {
	// Name names the case in the verdict.
	Name string `yaml:"name" json:"name"`
	// Prompt is the user message sent to the model.
	Prompt string `yaml:"prompt" json:"prompt,omitempty"`
	// Expect is what an answer must hold to pass.
	Expect Expect `yaml:"expect" json:"expect"`
	// Concurrency sends the prompt this many times at once (a load case); every answer is
	// judged, and one bad answer fails the case.
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// Tools are offered with the prompt (OpenAI function tools).
	Tools []Tool `yaml:"tools" json:"tools,omitempty"`
	// ChatTemplateKwargs are merged over the gate's for this case (e.g. enable_thinking: true).
	ChatTemplateKwargs map[string]any `yaml:"chat_template_kwargs" json:"chat_template_kwargs,omitempty"`
	// MaxTokens overrides the gate's max_tokens for this case (a thinking case needs more).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens,omitempty"`
	// Accuracy makes the case a scored sweep over a question set; it takes no prompt.
	Accuracy *Accuracy `yaml:"accuracy" json:"accuracy,omitempty"`
	// Needle makes the case generate its prompts: numbers hidden in texts of the given
	// lengths, sent together, each answer checked for its own number; it takes no prompt.
	Needle *Needle `yaml:"needle" json:"needle,omitempty"`
	// Messages are sent before the prompt (a system prompt, earlier turns); with no
	// prompt, the last must be the user's.
	Messages []Message `yaml:"messages" json:"messages,omitempty"`
	// Endpoint is chat (default: /v1/chat/completions), completions (/v1/completions) or
	// generate (SGLang's native /generate); the last two send the prompt as raw text.
	Endpoint string `yaml:"endpoint" json:"endpoint,omitempty"`
	// Stream asks for the answer as server-sent events: it is judged on the joined
	// chunks and on the stream's shape (every event parses, one final chunk, [DONE]).
	Stream bool `yaml:"stream" json:"stream,omitempty"`
	// Temperature, TopP and TopK are the sampling parameters (default: greedy).
	Temperature *float64 `yaml:"temperature" json:"temperature,omitempty"`
	TopP        *float64 `yaml:"top_p" json:"top_p,omitempty"`
	TopK        *int     `yaml:"top_k" json:"top_k,omitempty"`
	// Samples sends the case this many times at once, each request with its own seed
	// drawn from the run's (the report lists them); every sample is judged.
	Samples int `yaml:"samples" json:"samples,omitempty"`
	// Logprobs asks for the sampled tokens' logprobs: every value must be a finite number
	// at or below 0.
	Logprobs bool `yaml:"logprobs" json:"logprobs,omitempty"`
	// Generate draws each request's question and answer from the run's seed (see
	// Generators): arithmetic, capital, unit, list, needle, multi-turn, prefix-cache (a
	// pair sharing a long preamble, the second a prefix-cache hit), cjk, story (a long
	// generation) or json-capital (response_format json_schema).
	Generate string `yaml:"generate" json:"generate,omitempty"`
	// RequireCacheReport fails a prefix-cache pair whose second answer reports no
	// cached_tokens (SGLang reports them only with --enable-cache-report); without it such
	// a pair is judged on its answers alone.
	RequireCacheReport bool `yaml:"require_cache_report" json:"require_cache_report,omitempty"`
	// Soak makes the case fill the server's KV cache, then ask short questions (opt-in:
	// it takes minutes on a large pool).
	Soak *Soak `yaml:"soak" json:"soak,omitempty"`
}

// Kind says what sort of case c is: accuracy, long-context, tool, reasoning, load or chat.
func (c Case) Kind() string {
	switch {
	case c.Accuracy != nil:
		return KindAccuracy
	case c.Soak != nil:
		return KindSoak
	case c.Needle == nil && c.trafficKind() != "":
		return c.trafficKind()
	case c.Accuracy != nil:
		return KindAccuracy
	case c.Needle != nil && c.Needle.Longest() >= LongContextWords:
		return KindLong
	case c.Needle != nil && c.Needle.requests(c) > 1:
		return KindLoad
	case c.Needle != nil:
		return KindChat
	case len(c.Tools) > 0 || c.Expect.ToolCall != nil:
		return KindTool
	case c.Expect.Reasoning:
		return KindReasoning
	case c.Concurrency > 1:
		return KindLoad
	}
	return KindChat
}

var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func (c Case) validate() error {
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		return fmt.Errorf("concurrency %d: want 1 to %d", c.Concurrency, MaxConcurrency)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("max_tokens %d must not be negative", c.MaxTokens)
	}
	if c.Soak != nil {
		return c.Soak.validate(c)
	}
	if (c.Needle != nil || c.Accuracy != nil) && (len(c.Messages) > 0 || c.Generate != "" || (c.Endpoint != "" && c.Endpoint != EndpointChat) ||
		c.Stream || c.Samples > 0 || c.Expect.JSONSchema != nil || c.Expect.MinWords > 0 || c.Logprobs) {
		return errors.New("a needle or accuracy case takes no messages, generate, endpoint, stream, samples, logprobs, json_schema or min_words")
	}
	if c.Needle != nil {
		if c.Accuracy != nil {
			return errors.New("a case is a needle case or an accuracy case, not both")
		}
		return c.Needle.validate(c)
	}
	if a := c.Accuracy; a != nil {
		if strings.TrimSpace(c.Prompt) != "" || len(c.Tools) > 0 || c.Concurrency != 0 ||
			c.Expect.Regex != "" || len(c.Expect.Contains) > 0 || len(c.Expect.ContainsAny) > 0 ||
			c.Expect.ToolCall != nil || c.Expect.Reasoning {
			return errors.New("an accuracy case takes no prompt, tools, concurrency or expect: its questions carry their answers")
		}
		if strings.TrimSpace(a.Questions) == "" {
			return errors.New(`accuracy.questions is empty: want "builtin:NAME" or a JSONL file`)
		}
		if name, ok := strings.CutPrefix(a.Questions, BuiltinPrefix); ok {
			if _, err := BuiltinQuestions(name); err != nil {
				return fmt.Errorf("accuracy.questions: %w", err)
			}
		}
		if a.MinScore < 0 || a.MinScore > 1 {
			return fmt.Errorf("accuracy.min_score %g: want 0 to 1", a.MinScore)
		}
		if a.Concurrency < 0 || a.Concurrency > MaxConcurrency {
			return fmt.Errorf("accuracy.concurrency %d: want 1 to %d", a.Concurrency, MaxConcurrency)
		}
		if a.Limit < 0 {
			return fmt.Errorf("accuracy.limit %d must not be negative", a.Limit)
		}
		return nil
	}
	if err := c.validateTraffic(); err != nil {
		return err
	}
	if c.Expect.Regex != "" {
		if _, err := regexp.Compile(c.Expect.Regex); err != nil {
			return fmt.Errorf("expect.regex: %w", err)
		}
	}
	names := map[string]bool{}
	for i, t := range c.Tools {
		if !toolName.MatchString(t.Name) {
			return fmt.Errorf("tools[%d]: name %q: want letters, digits, _ . or -, up to 64", i, t.Name)
		}
		if names[t.Name] {
			return fmt.Errorf("tools[%d]: name %q used twice", i, t.Name)
		}
		names[t.Name] = true
		if _, err := json.Marshal(t.Parameters); err != nil {
			return fmt.Errorf("tools[%d] (%s): parameters: %w", i, t.Name, err)
		}
	}
	if tc := c.Expect.ToolCall; tc != nil {
		if tc.Name == "" {
			return errors.New("expect.tool_call.name is empty")
		}
		if !names[tc.Name] {
			return fmt.Errorf("expect.tool_call.name %q is not among the case's tools", tc.Name)
		}
		if _, err := json.Marshal(tc.Arguments); err != nil {
			return fmt.Errorf("expect.tool_call.arguments: %w", err)
		}
	}
	return nil
}

// BuiltinCases returns the cases used when a config names none: arithmetic with a single
// right number, a well-known fact, and a short Python function.
func BuiltinCases() []Case {
	return []Case{
		{Name: "arithmetic", Prompt: "What is 17 * 23? Answer with the number only.",
			Expect: Expect{Regex: `\b391\b`}},
		{Name: "fact", Prompt: "What is the capital of France? Answer with one word.",
			Expect: Expect{ContainsAny: []string{"Paris"}}},
		{Name: "code", Prompt: "Write a short Python function that returns the sum of a list of numbers. Reply with the code only.",
			Expect: Expect{Regex: `def \w+\(`}},
	}
}

// DefaultCases are the cases used when a config names none (`sglprov smoke --url`):
// BuiltinCases, the load case, a sweep of builtin:arithmetic, the long-context case and
// TrafficCases; about a minute against a healthy server.
func DefaultCases() []Case {
	cases := append(BuiltinCases(), BuiltinLoadCase(),
		Case{Name: "sweep", Accuracy: &Accuracy{Questions: "builtin:arithmetic", MinScore: DefaultMinScore, Concurrency: 16}},
		BuiltinLongCase())
	return append(cases, TrafficCases()...)
}

// WeatherTool is the function tool of the built-in tool-call case.
func WeatherTool() Tool {
	return Tool{Name: "get_weather", Description: "Get the current weather in a city.",
		Parameters: map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string", "description": "the city's name"}},
			"required":   []any{"city"}}}
}

// BuiltinSet returns BuiltinCases and one case of each other kind: 64 requests of mixed
// lengths and content at once, a tool call, the reasoning split with thinking on, a sweep
// of builtin:arithmetic, long prompts past one prefill chunk among short ones, and
// TrafficCases.
func BuiltinSet() []Case {
	return append(append(BuiltinCases(),
		BuiltinLoadCase(),
		Case{Name: "tool-call", Prompt: "What is the weather in Paris right now? Use the tool.",
			Tools:  []Tool{WeatherTool()},
			Expect: Expect{ToolCall: &ToolCallExpect{Name: "get_weather", Arguments: map[string]any{"city": "Paris"}}}},
		Case{Name: "thinking", Prompt: "What is 17 * 23?", MaxTokens: 4096,
			ChatTemplateKwargs: map[string]any{"enable_thinking": true},
			Expect:             Expect{Reasoning: true, Regex: `\b391\b`}},
		Case{Name: "sweep", Accuracy: &Accuracy{Questions: "builtin:arithmetic", MinScore: DefaultMinScore, Concurrency: 16}},
		BuiltinLongCase(),
	), TrafficCases()...)
}

// CanaryCase returns the first of cases that sends one request (no concurrency, no
// sweep), for a check that must stay light on a serving node; the first built-in case
// when there is none.
func CanaryCase(cases []Case) Case {
	for _, k := range cases {
		if k.Accuracy == nil && k.Needle == nil && k.Concurrency <= 1 && k.Samples <= 1 && k.Generate != GenPrefix && k.Soak == nil {
			return k
		}
	}
	return BuiltinCases()[0]
}

// Miss is a question of an accuracy case that was answered wrongly.
type Miss struct {
	// Prompt is the question; Want the answers that would have counted as right.
	Prompt string   `json:"prompt"`
	Want   []string `json:"want"`
	// Got is a short escaped excerpt of the content.
	Got string `json:"got"`
}

// CaseResult is the verdict of one case.
type CaseResult struct {
	// Name is the case's name.
	Name string `json:"name"`
	// Kind is chat, load, tool, reasoning or accuracy.
	Kind string `json:"kind"`
	// Pass is set when the case passed.
	Pass bool `json:"pass"`
	// Reason says why the case failed ("ok" when it passed; an accuracy case's score).
	Reason string `json:"reason"`
	// Latency is the time the case took: its one request, or all of its requests.
	Latency time.Duration `json:"-"`
	// Answers is how many answers were judged; Failed how many of them failed (a wrong
	// answer of an accuracy case is a miss, not a failure).
	Answers int `json:"answers"`
	Failed  int `json:"failed"`
	// P50 and P99 are the spread of the requests' latencies when there were several.
	P50, P99 time.Duration `json:"-"`
	// Sample is a short escaped excerpt of what the model said (the first failing answer
	// when one failed): the content, else the reasoning, or the tool call.
	Sample string `json:"sample"`
	// FinishReason is the choice's finish_reason, when there was one.
	FinishReason string `json:"finish_reason,omitempty"`
	// ToolCalls are the calls the server parsed, for a tool case.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Score, MinScore, Correct and Misses are an accuracy case's: the share of right
	// answers, the threshold, the count of right answers and the first misses.
	Score    *float64 `json:"score,omitempty"`
	MinScore float64  `json:"min_score,omitempty"`
	Correct  int      `json:"correct,omitempty"`
	Misses   []Miss   `json:"misses,omitempty"`
	// Seeds are the sampling seeds the case's requests were sent with (a sampled case).
	Seeds []uint64 `json:"seeds,omitempty"`
	// TTFT is the median time to the first token of the case's streamed answers;
	// DecodeTPS the median decode speed of its answers, in tokens/s (0: none gave one).
	TTFT      time.Duration `json:"-"`
	DecodeTPS float64       `json:"decode_tokens_per_second,omitempty"`
	// tps and ttfts are every answer's figures, for the run's medians.
	tps   []float64
	ttfts []time.Duration
}

// MarshalJSON encodes the result with its latency as "latency" (e.g. "1.25s") and
// "latency_ms", and the spread as "latency_p50_ms" and "latency_p99_ms" when the case
// sent several requests.
func (r CaseResult) MarshalJSON() ([]byte, error) {
	type plain CaseResult
	sample, cut := SampleText(r.Sample)
	out := struct {
		plain
		// The sample as plain text (JSON quotes it once), and whether the answer was cut.
		Sample    string  `json:"sample"`
		Truncated bool    `json:"sample_truncated,omitempty"`
		Latency   string  `json:"latency"`
		LatencyMS int64   `json:"latency_ms"`
		P50MS     *int64  `json:"latency_p50_ms,omitempty"`
		P99MS     *int64  `json:"latency_p99_ms,omitempty"`
		TTFTMS    float64 `json:"ttft_ms,omitempty"`
	}{plain: plain(r), Sample: sample, Truncated: cut, Latency: r.Latency.Round(time.Millisecond).String(), LatencyMS: r.Latency.Milliseconds(),
		TTFTMS: ms(r.TTFT)}
	if r.Answers > 1 {
		p50, p99 := r.P50.Milliseconds(), r.P99.Milliseconds()
		out.P50MS, out.P99MS = &p50, &p99
	}
	return json.Marshal(out)
}

// redact removes key from every text of the result.
func (r *CaseResult) redact(key string) {
	red := func(s string) string { return strings.ReplaceAll(s, key, "[redacted]") }
	r.Reason, r.Sample = red(r.Reason), red(r.Sample)
	for i := range r.Misses {
		r.Misses[i].Got = red(r.Misses[i].Got)
		r.Misses[i].Prompt = red(r.Misses[i].Prompt)
	}
	for i := range r.ToolCalls {
		r.ToolCalls[i].Arguments = red(r.ToolCalls[i].Arguments)
	}
}
