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
	"sort"
	"strings"
	"sync"
	"time"
)

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function Tool   `json:"function"`
}

type chatRequest struct {
	Model              string         `json:"model"`
	Messages           []chatMessage  `json:"messages"`
	Temperature        float64        `json:"temperature"`
	MaxTokens          int            `json:"max_tokens"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
	Tools              []chatTool     `json:"tools,omitempty"`
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
}

// request is one chat request of a case, ready to send.
type request struct {
	body   []byte
	expect Expect
	tools  bool
	// accept are an accuracy question's accepted answers.
	accept []string
}

func newRequest(cfg Config, model string, k Case, prompt string) request {
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
	req := chatRequest{
		Model:              model,
		Messages:           []chatMessage{{Role: "user", Content: prompt}},
		Temperature:        0,
		MaxTokens:          maxTokens,
		ChatTemplateKwargs: kwargs,
	}
	for _, t := range k.Tools {
		req.Tools = append(req.Tools, chatTool{Type: "function", Function: t})
	}
	body, _ := json.Marshal(req)
	return request{body: body, expect: k.Expect, tools: len(k.Tools) > 0}
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL+"/v1/chat/completions", bytes.NewReader(r.body))
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
	cresp, err := decodeAnswer(resp.Body)
	resp.Body.Close()
	a.latency = time.Since(start)
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

// runCase runs one case: one request, several at once (load), or a sweep (accuracy).
func runCase(ctx context.Context, cfg Config, model string, k Case, qs []Question) CaseResult {
	if k.Accuracy != nil {
		return runAccuracy(ctx, cfg, model, k, qs)
	}
	cr := CaseResult{Name: k.Name, Kind: k.Kind()}
	n := max(k.Concurrency, 1)
	r := newRequest(cfg, model, k, k.Prompt)
	req := func(int) request { return r }
	if k.Needle != nil {
		n = k.Needle.requests(k)
		req = func(i int) request { return needleRequest(cfg, model, k, i) }
	}
	start := time.Now()
	answers := askAll(ctx, cfg, n, req)
	cr.Latency = time.Since(start)
	if n == 1 {
		cr.Latency = answers[0].latency
	}
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
