// Cases that ask the way real traffic does: sampled, streamed, multi-turn, on SGLang's
// native endpoints, with logprobs, a JSON schema or a long answer, and questions drawn
// fresh from the run's seed.

package gate

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// Endpoints a case may ask.
const (
	// EndpointChat is /v1/chat/completions (the default).
	EndpointChat = "chat"
	// EndpointCompletions is /v1/completions: the prompt as raw text, no chat template.
	EndpointCompletions = "completions"
	// EndpointGenerate is SGLang's native /generate: text and sampling_params.
	EndpointGenerate = "generate"
)

// More case kinds, as CaseResult.Kind names them.
const (
	KindSampled     = "sampled"
	KindStream      = "stream"
	KindNative      = "native"
	KindMultiTurn   = "multi-turn"
	KindPrefixCache = "prefix-cache"
	KindJSON        = "json"
	KindLongGen     = "long-generation"
	KindCJK         = "cjk"
	// KindPerformance is the verdict on the run's speed (floors, the serving generation's
	// figures), not a case of the config.
	KindPerformance = "performance"
)

// Generators a case may name in generate: each draws request i's question and its answer
// from the run's seed, so that no two runs send the same prompts.
const (
	GenArithmetic = "arithmetic"
	GenCapital    = "capital"
	GenUnit       = "unit"
	GenList       = "list"
	GenNeedle     = "needle"
	GenMultiTurn  = "multi-turn"
	GenPrefix     = "prefix-cache"
	GenCJK        = "cjk"
	GenStory      = "story"
	GenJSON       = "json-capital"
)

// Generators lists the generator names a case may use.
func Generators() []string {
	return []string{GenArithmetic, GenCapital, GenUnit, GenList, GenNeedle, GenMultiTurn, GenPrefix, GenCJK, GenStory, GenJSON}
}

// Limits of the traffic fields.
const (
	// MaxSamples is the most samples a case may ask.
	MaxSamples = 256
	// DefaultStoryWords is the least words a story answer must have when its case sets no
	// expect.min_words.
	DefaultStoryWords = 300
	// PrefixWords is the length of the shared preamble of a prefix-cache pair, in words:
	// past SGLang's radix cache page and several of its chunks, well within one context.
	PrefixWords = 1200
	// LoopShingle and LoopRepeats: a long answer in which one run of LoopShingle words
	// comes back LoopRepeats times or more is looping.
	LoopShingle = 10
	LoopRepeats = 4
	// SeedEnv names the environment variable that replays a run's seed.
	SeedEnv = "SGLPROV_SMOKE_SEED"
)

// TrafficCases are the cases that ask as real traffic does, each drawing fresh questions
// from the run's seed: sampled (4 samples, logprobs), streamed, multi-turn with a system
// prompt, a prefix-cache pair, /v1/completions and /generate (logprobs), a JSON schema,
// Chinese, a long generation (streamed), and a sweep of capitals.
func TrafficCases() []Case {
	temp, topP, topK := 0.7, 0.95, 20
	noThink := map[string]any{"enable_thinking": false}
	return []Case{
		{Name: "sampled", Generate: GenArithmetic, Samples: 4, Temperature: &temp, TopP: &topP, TopK: &topK, Logprobs: true},
		{Name: "streamed", Generate: GenCapital, Stream: true, Concurrency: 2},
		{Name: "multi-turn", Generate: GenMultiTurn},
		{Name: "prefix-cache", Generate: GenPrefix},
		{Name: "completions", Generate: GenList, Endpoint: EndpointCompletions, Logprobs: true, MaxTokens: 64},
		{Name: "native", Generate: GenUnit, Endpoint: EndpointGenerate, Logprobs: true, MaxTokens: 64},
		{Name: "json", Generate: GenJSON, ChatTemplateKwargs: noThink},
		{Name: "cjk", Generate: GenCJK, Concurrency: 2},
		{Name: "long-generation", Generate: GenStory, Stream: true, MaxTokens: 1500, ChatTemplateKwargs: noThink},
		{Name: "facts", Accuracy: &Accuracy{Questions: "builtin:capitals", MinScore: DefaultMinScore, Concurrency: 16, Limit: 24}},
	}
}

// Message is one message of a case's conversation.
type Message struct {
	// Role is system, user or assistant.
	Role string `yaml:"role" json:"role"`
	// Content is the message's text.
	Content string `yaml:"content" json:"content"`
}

// NewSeed returns a seed drawn from the system's random source (never 0).
func NewSeed() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 1
	}
	return max(binary.LittleEndian.Uint64(b[:])>>11, 1) // within a JSON number's exact range
}

// ParseSeed reads a seed as the report writes it (a decimal number).
func ParseSeed(s string) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("seed %q: want a positive whole number, as a report's seed shows it", s)
	}
	return v, nil
}

// subSeed derives the seed of request i of the case named name from the run's seed.
func subSeed(seed uint64, name string, i int) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
	h.Write(b[:])
	h.Write([]byte(name))
	return h.Sum64()
}

// sampleSeed is the sampling seed of request i of the case named name: drawn from the
// run's seed, within what every server takes as a seed (a positive 31-bit number).
func sampleSeed(seed uint64, name string, i int) uint64 {
	return subSeed(seed, name+"/sample", i)%(1<<31-1) + 1
}

// sampled reports whether the case samples (temperature above 0, or samples asked).
func (c Case) sampled() bool {
	return (c.Temperature != nil && *c.Temperature > 0) || c.Samples > 0 || (c.TopP != nil && *c.TopP < 1) || (c.TopK != nil && *c.TopK > 0)
}

// trafficKind returns the kind of a case that asks as real traffic does, or "".
func (c Case) trafficKind() string {
	switch {
	case c.Generate == GenPrefix:
		return KindPrefixCache
	case c.Expect.MinWords > 0 || c.Generate == GenStory:
		return KindLongGen
	case c.Expect.JSONSchema != nil || c.Generate == GenJSON:
		return KindJSON
	case c.Endpoint == EndpointCompletions || c.Endpoint == EndpointGenerate:
		return KindNative
	case c.Stream:
		return KindStream
	case c.Generate == GenMultiTurn || userTurns(c.Messages) > 0:
		return KindMultiTurn
	case c.Generate == GenCJK:
		return KindCJK
	case c.sampled():
		return KindSampled
	}
	return ""
}

func userTurns(ms []Message) int {
	n := 0
	for _, m := range ms {
		if m.Role == "user" {
			n++
		}
	}
	return n
}

// validateTraffic checks the traffic fields of a prompt or generated case.
func (c Case) validateTraffic() error {
	switch c.Endpoint {
	case "", EndpointChat:
	case EndpointCompletions, EndpointGenerate:
		if len(c.Messages) > 0 || len(c.Tools) > 0 || c.Expect.Reasoning || c.Expect.ToolCall != nil || len(c.ChatTemplateKwargs) > 0 {
			return fmt.Errorf("endpoint %s takes a prompt only: no messages, tools, chat_template_kwargs or reasoning (they are the chat endpoint's)", c.Endpoint)
		}
		if c.Endpoint == EndpointGenerate && (c.Stream || c.Expect.JSONSchema != nil) {
			return errors.New("endpoint generate: stream and expect.json_schema are asked on chat or completions")
		}
		if c.Generate == GenMultiTurn || c.Generate == GenPrefix || c.Generate == GenJSON {
			return fmt.Errorf("generate %s needs the chat endpoint", c.Generate)
		}
	default:
		return fmt.Errorf("endpoint %q: want chat, completions or generate", c.Endpoint)
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) {
		return fmt.Errorf("temperature %g: want 0 to 2", *c.Temperature)
	}
	if c.TopP != nil && (*c.TopP <= 0 || *c.TopP > 1) {
		return fmt.Errorf("top_p %g: want above 0, at most 1", *c.TopP)
	}
	if c.TopK != nil && (*c.TopK < -1 || *c.TopK == 0) {
		return fmt.Errorf("top_k %d: want -1 (all) or a positive count", *c.TopK)
	}
	if c.Samples < 0 || c.Samples > MaxSamples {
		return fmt.Errorf("samples %d: want 0 to %d", c.Samples, MaxSamples)
	}
	if c.Stream && len(c.Tools) > 0 {
		return errors.New("a streamed case takes no tools: the tool call is judged unstreamed")
	}
	for i, m := range c.Messages {
		if m.Role != "system" && m.Role != "user" && m.Role != "assistant" {
			return fmt.Errorf("messages[%d]: role %q: want system, user or assistant", i, m.Role)
		}
		if strings.TrimSpace(m.Content) == "" {
			return fmt.Errorf("messages[%d]: content is empty", i)
		}
	}
	if c.Generate != "" {
		if !slices.Contains(Generators(), c.Generate) {
			return fmt.Errorf("generate %q: want one of %s", c.Generate, strings.Join(Generators(), ", "))
		}
		if strings.TrimSpace(c.Prompt) != "" || len(c.Messages) > 0 || c.Expect.Regex != "" || len(c.Expect.Contains) > 0 ||
			len(c.Expect.ContainsAny) > 0 || c.Expect.ToolCall != nil || len(c.Tools) > 0 || c.Expect.JSONSchema != nil {
			return fmt.Errorf("a generated case (generate %s) takes no prompt, messages, tools or expected text: it draws its questions and their answers", c.Generate)
		}
	} else {
		if strings.TrimSpace(c.Prompt) == "" && len(c.Messages) == 0 {
			return errors.New("prompt is empty")
		}
		if strings.TrimSpace(c.Prompt) == "" && c.Messages[len(c.Messages)-1].Role != "user" {
			return errors.New("the last message must be the user's (or give a prompt)")
		}
	}
	if c.Expect.MinWords < 0 {
		return fmt.Errorf("expect.min_words %d must not be negative", c.Expect.MinWords)
	}
	if s := c.Expect.JSONSchema; s != nil {
		if err := checkSchema(s, "expect.json_schema"); err != nil {
			return err
		}
	}
	return nil
}

// loopFinding reports a long answer that loops: one run of LoopShingle words that comes
// back LoopRepeats times or more, anywhere in the kept text.
func loopFinding(parts []string) *Finding {
	for _, p := range parts {
		words := strings.Fields(p)
		if len(words) < LoopShingle*LoopRepeats {
			continue
		}
		seen := map[string]int{}
		for i := 0; i+LoopShingle <= len(words); i++ {
			k := strings.Join(words[i:i+LoopShingle], " ")
			seen[k]++
			if seen[k] >= LoopRepeats {
				return &Finding{Detector: "word-loop", Detail: fmt.Sprintf("%q comes back %d times (from word %d of %d)",
					k, seen[k], i+1, len(words))}
			}
		}
	}
	return nil
}

// wordCount counts the words of a kept text (the dropped middle estimated from its
// bytes at 6 bytes a word).
func wordCount(t text) int {
	n := 0
	for _, p := range t.parts() {
		n += len(strings.Fields(p))
	}
	if t.cut() {
		n += int((t.size - int64(len(t.head)+len(t.tail))) / 6)
	}
	return n
}

// judgeTraffic returns why an answer fails what its request asked beyond the text: usage
// consistent, logprobs finite, the prefix cache hit, the JSON schema held, a long answer
// long enough and not looping; "" when it holds.
func judgeTraffic(resp chatResponse, r request) string {
	content, reasoning := resp.content, resp.reasoning
	if u := resp.usage; u != nil {
		switch {
		case u.prompt <= 0:
			return fmt.Sprintf("usage.prompt_tokens is %d: the server counted no prompt tokens for a prompt it answered", u.prompt)
		case u.completion <= 0 && (!content.blank() || !reasoning.blank()):
			return fmt.Sprintf("usage.completion_tokens is %d for an answer of %d bytes", u.completion, content.size+reasoning.size)
		case u.hasTotal && u.total != u.prompt+u.completion:
			return fmt.Sprintf("usage.total_tokens %d is not prompt_tokens %d + completion_tokens %d", u.total, u.prompt, u.completion)
		case u.reported && (u.cached < 0 || u.cached > u.prompt):
			return fmt.Sprintf("usage cached_tokens %d is outside 0 to prompt_tokens %d", u.cached, u.prompt)
		}
	}
	if r.logprobs {
		switch l := resp.logprobs; {
		case !l.present || l.n == 0:
			return "no logprobs came back, though the request asked for them"
		case l.bad != "":
			return "bad logprobs: " + l.bad
		}
	}
	if r.cached {
		u := resp.usage
		switch {
		case (u == nil || !u.reported) && !r.requireReport:
			// Judged on its answers alone: the server does not say whether it hit.
		case u == nil || !u.reported:
			return "the answer reports no cached_tokens: SGLang reports prefix-cache hits in usage.prompt_tokens_details only with --enable-cache-report"
		case u.cached == 0:
			return fmt.Sprintf("cached_tokens 0: the second prompt shares a %d-word preamble with the first, and the prefix cache did not hit (is --disable-radix-cache set?)", PrefixWords)
		}
	}
	if r.expect.JSONSchema != nil {
		if content.cut() {
			return fmt.Sprintf("content is %d bytes, too long to parse as the JSON the schema asks for", content.size)
		}
		var v any
		if err := json.Unmarshal([]byte(strings.TrimSpace(content.head)), &v); err != nil {
			return fmt.Sprintf("content is not JSON under response_format json_schema (%v): %s", err, Sample(content.head, SampleRunes))
		}
		if why := validateJSON(v, r.expect.JSONSchema, "the answer"); why != "" {
			return "content does not hold the JSON schema: " + why
		}
	}
	if r.expect.MinWords > 0 {
		if f := loopFinding(content.parts()); f != nil {
			return fmt.Sprintf("degenerate content (%s): %s", f.Detector, f.Detail)
		}
		if n := wordCount(content); n < r.expect.MinWords {
			return fmt.Sprintf("content has %d words, the case asks for at least %d (finish_reason %s)", n, r.expect.MinWords, resp.finish)
		}
	}
	return ""
}
