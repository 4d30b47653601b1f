package smoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

type chatTool struct {
	Type     string `json:"type"`
	Function Tool   `json:"function"`
}

// answer is the verdict on one answer of a case: what the case's verdict needs of it, and
// never the answer itself.
type answer struct {
	pass      bool
	reason    string
	sample    string
	finish    string
	latency   time.Duration
	toolCalls []ToolCall
	// right is set when the content holds one of the request's accepted answers (an
	// accuracy question).
	right bool
	// ttft is the time to the first token of a streamed answer; tokens the answer's
	// completion tokens (usage), 0 when unknown.
	ttft   time.Duration
	tokens int64
}

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
	kwargs := cfg.ChatTemplateKwargs
	if len(k.ChatTemplateKwargs) > 0 {
		kwargs = make(map[string]any, len(cfg.ChatTemplateKwargs)+len(k.ChatTemplateKwargs))
		for key, v := range cfg.ChatTemplateKwargs {
			kwargs[key] = v
		}
		for key, v := range k.ChatTemplateKwargs {
			kwargs[key] = v
		}
	}
	maxTokens := cfg.MaxTokens
	if k.MaxTokens > 0 {
		maxTokens = k.MaxTokens
	}
	if schema == nil {
		schema = exp.JSONSchema
	}
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
	r := request{expect: exp, tools: len(k.Tools) > 0, stream: k.Stream, logprobs: k.Logprobs}
	if seed != 0 {
		r.seed = seed
	}
	body := map[string]any{}
	switch k.Endpoint {
	case EndpointCompletions, EndpointGenerate:
		prompt := msgs[len(msgs)-1].Content
		if k.Generate != "" {
			prompt = "Question: " + prompt + "\nAnswer:"
		}
		if k.Endpoint == EndpointGenerate {
			r.path = "/generate"
			sp := map[string]any{"max_new_tokens": maxTokens}
			for key, v := range sampling {
				sp[key] = v
			}
			if r.seed != 0 {
				sp["sampling_seed"] = r.seed
			}
			body["text"], body["sampling_params"] = prompt, sp
			if k.Logprobs {
				body["return_logprob"] = true
			}
			break
		}
		r.path = "/v1/completions"
		body["model"], body["prompt"], body["max_tokens"] = model, prompt, maxTokens
		for key, v := range sampling {
			body[key] = v
		}
		if r.seed != 0 {
			body["seed"] = r.seed
		}
		if k.Logprobs {
			body["logprobs"] = 1
		}
	default:
		r.path = "/v1/chat/completions"
		body["model"], body["messages"], body["max_tokens"] = model, msgs, maxTokens
		for key, v := range sampling {
			body[key] = v
		}
		if r.seed != 0 {
			body["seed"] = r.seed
		}
		if len(kwargs) > 0 {
			body["chat_template_kwargs"] = kwargs
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
		if schema != nil {
			body["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": "answer", "schema": schema}}
		}
	}
	if k.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	r.body, _ = json.Marshal(body)
	return r
}

// ask sends one request and judges its answer.
func ask(ctx context.Context, cfg Config, r request) answer {
	var a answer
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	// spent says why the request ended early when the run's budget for its cases did.
	spent := func() string {
		var b casesBudget
		if errors.As(context.Cause(parent), &b) {
			return "no answer before " + b.Error()
		}
		return ""
	}
	start := time.Now()
	path := r.path
	if path == "" {
		path = "/v1/chat/completions"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL+path, bytes.NewReader(r.body))
	if err != nil {
		a.reason = "building request: " + err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	auth(req, cfg)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		a.latency = time.Since(start)
		if why := spent(); why != "" {
			a.reason = why
		} else if errors.Is(err, context.DeadlineExceeded) {
			a.reason = fmt.Sprintf("no answer within the request timeout (%s)", cfg.RequestTimeout)
		} else {
			a.reason = "request failed: " + shortErr(err)
		}
		return a
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		a.latency = time.Since(start)
		body := strings.TrimSpace(string(raw))
		if cfg.APIKey != "" {
			body = strings.ReplaceAll(body, cfg.APIKey, "[redacted]")
		}
		a.reason = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, Sample(body, SampleRunes))
		return a
	}
	// The answer is judged as it arrives, keeping only its bounded parts.
	var cresp chatResponse
	if r.stream {
		cresp, a.ttft, err = decodeStream(resp.Body, start)
	} else {
		cresp, err = decodeAnswer(resp.Body)
	}
	resp.Body.Close()
	a.latency = time.Since(start)
	if cresp.usage != nil {
		a.tokens = cresp.usage.completion
	}
	if err != nil {
		if why := spent(); why != "" {
			a.reason = why
		} else if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			a.reason = fmt.Sprintf("no whole answer within the request timeout (%s)", cfg.RequestTimeout)
		} else {
			a.reason = err.Error()
		}
		return a
	}
	judging <- struct{}{}
	judge(&a, cresp, r)
	<-judging
	return a
}

// judging bounds how many answers are judged at once: the detectors are CPU work, and
// each needs memory in proportion to the text it looks at.
var judging = make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))

// runCase runs one case: one request, several at once (load, samples, generated
// questions), prefix-cache pairs, or a sweep (accuracy).
func runCase(ctx context.Context, cfg Config, model string, k Case, qs []Question) CaseResult {
	if k.Accuracy != nil {
		return runAccuracy(ctx, cfg, model, k, qs)
	}
	cr := CaseResult{Name: k.Name, Kind: k.Kind()}
	n := max(k.Concurrency, k.Samples, 1)
	var req func(int) request
	switch {
	case k.Needle != nil:
		n = k.Needle.requests(k)
		req = func(i int) request { return needleRequest(cfg, model, k, i) }
	case k.Generate == GenPrefix:
		return runPrefix(ctx, cfg, model, k)
	case k.Soak != nil:
		return runSoak(ctx, cfg, model, k)
	case k.Generate != "":
		req = func(i int) request {
			g := generate(k.Generate, subSeed(cfg.Seed, k.Name, i))
			return buildRequest(cfg, model, k, g.messages, g.expect, caseSeed(cfg, k, i), g.schema)
		}
	default:
		r := newRequest(cfg, model, k, k.Prompt)
		req = func(i int) request {
			if seed := caseSeed(cfg, k, i); seed != 0 {
				return buildRequest(cfg, model, k, r.messages(k), k.Expect, seed, nil)
			}
			return r
		}
	}
	reqs := make([]request, n)
	for i := range n {
		reqs[i] = req(i)
		if s := reqs[i].seed; s != 0 && len(cr.Seeds) < MaxSamples {
			cr.Seeds = append(cr.Seeds, s)
		}
	}
	start := time.Now()
	answers := askAll(ctx, cfg, n, func(i int) request { return reqs[i] })
	cr.Latency = time.Since(start)
	if n == 1 {
		cr.Latency = answers[0].latency
	}
	summarize(&cr, answers)
	return cr
}

// caseSeed is the sampling seed of request i of a sampled case, 0 for a greedy one.
func caseSeed(cfg Config, k Case, i int) uint64 {
	if !k.sampled() {
		return 0
	}
	return sampleSeed(cfg.Seed, k.Name, i)
}

// messages returns what a prompt case sends: its messages and its prompt.
func (request) messages(k Case) []Message {
	if strings.TrimSpace(k.Prompt) == "" {
		return k.Messages
	}
	return append(slices.Clone(k.Messages), Message{Role: "user", Content: k.Prompt})
}

// runPrefix runs a prefix-cache case: max(samples, 1) pairs at once, each pair's two
// requests one after the other, sharing a long preamble; the second must report a
// prefix-cache hit, and both answers must be right.
func runPrefix(ctx context.Context, cfg Config, model string, k Case) CaseResult {
	cr := CaseResult{Name: k.Name, Kind: KindPrefixCache}
	pairs := max(k.Samples, 1)
	answers := make([]answer, 2*pairs)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := generate(GenPrefix, subSeed(cfg.Seed, k.Name, i))
			seed := caseSeed(cfg, k, i)
			answers[2*i] = ask(ctx, cfg, buildRequest(cfg, model, k, g.messages, g.expect, seed, nil))
			second := buildRequest(cfg, model, k, g.second.messages, g.second.expect, seed, nil)
			second.cached, second.requireReport = true, k.RequireCacheReport
			answers[2*i+1] = ask(ctx, cfg, second)
		}()
		if seed := caseSeed(cfg, k, i); seed != 0 {
			cr.Seeds = append(cr.Seeds, seed)
		}
	}
	wg.Wait()
	cr.Latency = time.Since(start)
	summarize(&cr, answers)
	return cr
}

// askAll sends n requests, at most n at once, all released together, and returns the
// answers in order.
func askAll(ctx context.Context, cfg Config, n int, req func(i int) request) []answer {
	if n == 1 {
		return []answer{ask(ctx, cfg, req(0))}
	}
	out := make([]answer, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			out[i] = ask(ctx, cfg, req(i))
		}()
	}
	close(gate)
	wg.Wait()
	return out
}

// summarize fills the verdict of a case from its answers: it passes when every answer
// passed.
func summarize(cr *CaseResult, answers []answer) {
	cr.Answers = len(answers)
	var first *answer
	for i := range answers {
		if !answers[i].pass {
			cr.Failed++
			if first == nil {
				first = &answers[i]
			}
		}
	}
	cr.P50, cr.P99 = spread(answers)
	casePerf(cr, answers)
	show := &answers[0]
	if first != nil {
		show = first
	}
	cr.Sample, cr.FinishReason, cr.ToolCalls = show.sample, show.finish, show.toolCalls
	switch {
	case first == nil:
		cr.Pass, cr.Reason = true, "ok"
	case len(answers) == 1:
		cr.Reason = first.reason
	default:
		cr.Reason = fmt.Sprintf("%d of %d answers failed; first: %s", cr.Failed, len(answers), first.reason)
	}
}

// spread returns the 50th and 99th percentile of the answers' latencies (nearest rank).
func spread(answers []answer) (p50, p99 time.Duration) {
	if len(answers) == 0 {
		return 0, 0
	}
	ls := make([]time.Duration, len(answers))
	for i, a := range answers {
		ls[i] = a.latency
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	return percentile(ls, 50), percentile(ls, 99)
}

func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// runAccuracy asks every question of the case's set and scores the answers. An answer
// that fails the gate's checks (transport, NaN, degenerate text, ...) fails the case
// outright; a fluent answer without the right token is a miss and lowers the score.
func runAccuracy(ctx context.Context, cfg Config, model string, k Case, qs []Question) CaseResult {
	acc := *k.Accuracy
	if acc.MinScore == 0 {
		acc.MinScore = DefaultMinScore
	}
	if acc.Concurrency == 0 {
		acc.Concurrency = DefaultAccuracyConcurrency
	}
	cr := CaseResult{Name: k.Name, Kind: KindAccuracy, MinScore: acc.MinScore}
	if len(qs) == 0 {
		cr.Reason = "no questions"
		return cr
	}
	if acc.Limit > 0 && acc.Limit < len(qs) {
		qs = qs[:acc.Limit]
	}
	reqs := make([]request, len(qs))
	for i, q := range qs {
		reqs[i] = newRequest(cfg, model, k, q.Prompt)
		reqs[i].accept = q.Answers
	}
	start := time.Now()
	answers := make([]answer, len(qs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(acc.Concurrency, len(qs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				answers[i] = ask(ctx, cfg, reqs[i])
			}
		}()
	}
	for i := range qs {
		work <- i
	}
	close(work)
	wg.Wait()
	cr.Latency = time.Since(start)
	summarize(&cr, answers)
	if cr.Failed > 0 {
		return cr
	}
	for i, a := range answers {
		if a.right {
			cr.Correct++
			continue
		}
		if len(cr.Misses) < MissesShown {
			cr.Misses = append(cr.Misses, Miss{Prompt: qs[i].Prompt, Want: qs[i].Answers, Got: a.sample})
		}
	}
	score := float64(cr.Correct) / float64(len(qs))
	cr.Score = &score
	cr.Pass = score >= acc.MinScore
	verdict := "at or above"
	if !cr.Pass {
		verdict = "below"
		if len(cr.Misses) > 0 {
			cr.Sample = cr.Misses[0].Got
		}
	}
	cr.Reason = fmt.Sprintf("score %.2f (%d/%d right), %s the threshold %.2f", score, cr.Correct, len(qs), verdict, acc.MinScore)
	return cr
}

// Texts in content that show the server did not parse what it should have.
var (
	rawToolCall = regexp.MustCompile(`<tool_call>|</tool_call>|<function=[^>\s]*>`)
	thinkTag    = regexp.MustCompile(`</?think>`)
)

// judge fills a's verdict from a decoded answer.
func judge(a *answer, resp chatResponse, r request) {
	exp := r.expect
	if resp.shapeErr != "" {
		a.reason = resp.shapeErr
		return
	}
	if resp.choices == 0 {
		a.reason = "answer has no choices"
		return
	}
	content, reasoning := resp.content, resp.reasoning
	a.finish = resp.finish
	calls := resp.calls
	a.toolCalls = calls
	switch {
	case !content.blank():
		a.sample = Sample(content.head, SampleRunes)
	case len(calls) > 0:
		a.sample = Sample(calls[0].String(), SampleRunes)
	default:
		a.sample = Sample(reasoning.head, SampleRunes)
	}
	if a.finish == "abort" {
		a.reason = "finish_reason abort: the server aborted the request"
		return
	}
	if resp.matchedStop == NaNStop {
		a.reason = `matched_stop "NaN happened": the model produced NaN logits`
		return
	}
	if resp.callErr != "" {
		a.reason = resp.callErr
		return
	}
	for _, f := range []struct {
		name string
		text text
	}{{"content", content}, {"reasoning_content", reasoning}} {
		for _, part := range f.text.parts() {
			if d := Detect(part); d != nil {
				a.reason = fmt.Sprintf("degenerate %s (%s): %s", f.name, d.Detector, d.Detail)
				return
			}
		}
	}
	for _, c := range calls {
		for _, f := range []struct{ name, text string }{{"name", c.Name}, {"arguments", c.Arguments}} {
			if d := Detect(f.text); d != nil {
				a.reason = fmt.Sprintf("degenerate tool call %s (%s): %s", f.name, d.Detector, d.Detail)
				return
			}
		}
	}
	if msg := judgeTraffic(resp, r); msg != "" {
		a.reason = msg
		return
	}
	if r.tools || exp.ToolCall != nil {
		if m := findIn(rawToolCall, content); m != "" {
			a.reason = fmt.Sprintf("tool call left as raw %s text in content, not parsed into tool_calls: check --tool-call-parser (qwen3_coder for Qwen3.5), the chat template and the model revision", m)
			return
		}
	}
	if exp.ToolCall != nil {
		if msg := unmetToolCall(calls, *exp.ToolCall); msg != "" {
			a.reason = msg
			return
		}
		if msg := unmet(content, exp); msg != "" {
			a.reason = msg
			return
		}
		a.pass, a.reason = true, "ok"
		return
	}
	if content.blank() && reasoning.blank() {
		if len(calls) > 0 {
			a.reason = "answered with a tool call instead of text"
			return
		}
		a.reason = "empty answer: content and reasoning_content are both empty"
		return
	}
	if exp.Reasoning {
		if m := findIn(thinkTag, content); m != "" {
			a.reason = fmt.Sprintf("think tag %s inline in content: the reasoning parser did not split the answer (check --reasoning-parser qwen3)", m)
			return
		}
		if reasoning.blank() {
			a.reason = "reasoning_content is empty: no thinking came back split from the answer (check --reasoning-parser qwen3 and chat_template_kwargs enable_thinking: true)"
			return
		}
	}
	if content.blank() {
		if a.finish == "length" {
			a.reason = "answer cut off while reasoning (finish_reason length, content empty): raise max_tokens or set chat_template_kwargs enable_thinking: false"
		} else {
			a.reason = "content empty: the model answered only in reasoning_content"
		}
		return
	}
	if msg := unmet(content, exp); msg != "" {
		a.reason = msg
		return
	}
	a.pass, a.reason = true, "ok"
	if r.accept != nil {
		a.right = HasAnswer(content.head, r.accept) || (content.tail != "" && HasAnswer(content.tail, r.accept))
	}
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
