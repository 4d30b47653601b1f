package gate

import (
	"encoding/json"
	"slices"
	"strings"
)

type chatTool struct {
	Type     string `json:"type"`
	Function Tool   `json:"function"`
}

// answer is the verdict on one answer of a case: what the case's verdict needs of it, and

// request is one request of a case, ready to send.
type request struct {
	body   []byte
	path   string
	stream bool
	expect Expect
	tools  bool
	// accept are an accuracy question's accepted answers.
	accept []string
	// logprobs is set when the request asked for them; cached when its answer must
	// report a prefix-cache hit (the second of a prefix-cache pair).
	logprobs, cached bool
	// requireReport fails a cached request whose answer reports no cached_tokens.
	requireReport bool
	// seed is the sampling seed sent (0: greedy, none sent).
	seed uint64
}

func newRequest(cfg Config, model string, k Case, prompt string) request {
	msgs := append(slices.Clone(k.Messages), Message{Role: "user", Content: prompt})
	if strings.TrimSpace(prompt) == "" {
		msgs = k.Messages
	}
	return buildRequest(cfg, model, k, msgs, k.Expect, 0, nil)
}

// DefaultSampleTemperature is the temperature of a case that asks samples and sets none.
const DefaultSampleTemperature = 0.7

// buildRequest builds a request of case k asking msgs (the last the user's) on the
// case's endpoint; seed, when not 0, is sent as the sampling seed with the case's
// sampling parameters; schema, when set, as response_format json_schema.
func buildRequest(cfg Config, model string, k Case, msgs []Message, exp Expect, seed uint64, schema map[string]any) request {
	maxTokens := cfg.MaxTokens
	if k.MaxTokens > 0 {
		maxTokens = k.MaxTokens
	}
	if schema == nil {
		schema = exp.JSONSchema
	}
	r := request{expect: exp, tools: len(k.Tools) > 0, stream: k.Stream, logprobs: k.Logprobs}
	if seed != 0 {
		r.seed = seed
	}
	in := bodyInput{model: model, msgs: msgs, maxTokens: maxTokens, seed: r.seed, schema: schema}
	body := map[string]any{}
	switch k.Endpoint {
	case EndpointGenerate:
		r.path = "/generate"
		generateBody(body, k, in)
	case EndpointCompletions:
		r.path = "/v1/completions"
		completionsBody(body, k, in)
	default:
		r.path = "/v1/chat/completions"
		in.kwargs = templateKwargs(cfg, k)
		chatBody(body, k, in)
	}
	if k.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	r.body, _ = json.Marshal(body)
	return r
}

// bodyInput is what a request's body is built from besides its case.
type bodyInput struct {
	model     string
	msgs      []Message
	maxTokens int
	// seed is the sampling seed sent (0: none).
	seed uint64
	// schema is sent as response_format json_schema (chat only); kwargs as
	// chat_template_kwargs.
	schema, kwargs map[string]any
}

// completionPrompt is the prompt a completions or generate request sends: the last
// message, framed as a question when the case generates its questions.
func completionPrompt(k Case, msgs []Message) string {
	prompt := msgs[len(msgs)-1].Content
	if k.Generate != "" {
		prompt = "Question: " + prompt + "\nAnswer:"
	}
	return prompt
}

// caseSampling returns the case's sampling parameters: its temperature (greedy unless
// set or sampled), top_p and top_k.
func caseSampling(k Case) map[string]any {
	sampling := map[string]any{"temperature": 0.0}
	if k.Temperature != nil {
		sampling["temperature"] = *k.Temperature
	} else if k.Samples > 0 {
		sampling["temperature"] = DefaultSampleTemperature
	}
	if k.TopP != nil {
		sampling["top_p"] = *k.TopP
	}
	if k.TopK != nil {
		sampling["top_k"] = *k.TopK
	}
	return sampling
}

// templateKwargs returns the chat_template_kwargs a case sends: the run's, with the
// case's own over them.
func templateKwargs(cfg Config, k Case) map[string]any {
	if len(k.ChatTemplateKwargs) == 0 {
		return cfg.ChatTemplateKwargs
	}
	kwargs := make(map[string]any, len(cfg.ChatTemplateKwargs)+len(k.ChatTemplateKwargs))
	for key, v := range cfg.ChatTemplateKwargs {
		kwargs[key] = v
	}
	for key, v := range k.ChatTemplateKwargs {
		kwargs[key] = v
	}
	return kwargs
}

// generateBody fills the body of a request to SGLang's native /generate.
func generateBody(body map[string]any, k Case, in bodyInput) {
	sp := map[string]any{"max_new_tokens": in.maxTokens}
	for key, v := range caseSampling(k) {
		sp[key] = v
	}
	if in.seed != 0 {
		sp["sampling_seed"] = in.seed
	}
	body["text"], body["sampling_params"] = completionPrompt(k, in.msgs), sp
	if k.Logprobs {
		body["return_logprob"] = true
	}
}

// completionsBody fills the body of a request to /v1/completions.
func completionsBody(body map[string]any, k Case, in bodyInput) {
	body["model"], body["prompt"], body["max_tokens"] = in.model, completionPrompt(k, in.msgs), in.maxTokens
	for key, v := range caseSampling(k) {
		body[key] = v
	}
	if in.seed != 0 {
		body["seed"] = in.seed
	}
	if k.Logprobs {
		body["logprobs"] = 1
	}
}

// chatBody fills the body of a request to /v1/chat/completions.
func chatBody(body map[string]any, k Case, in bodyInput) {
	body["model"], body["messages"], body["max_tokens"] = in.model, in.msgs, in.maxTokens
	for key, v := range caseSampling(k) {
		body[key] = v
	}
	if in.seed != 0 {
		body["seed"] = in.seed
	}
	if len(in.kwargs) > 0 {
		body["chat_template_kwargs"] = in.kwargs
	}
	var tools []chatTool
	for _, t := range k.Tools {
		tools = append(tools, chatTool{Type: "function", Function: t})
	}
	if len(tools) > 0 {
		body["tools"] = tools
	}
	if k.Logprobs {
		body["logprobs"] = true
	}
	if in.schema != nil {
		body["response_format"] = map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "answer", "schema": in.schema}}
	}
}

// messages returns what a prompt case sends: its messages and its prompt.
func (request) messages(k Case) []Message {
	if strings.TrimSpace(k.Prompt) == "" {
		return k.Messages
	}
	return append(slices.Clone(k.Messages), Message{Role: "user", Content: k.Prompt})
}
