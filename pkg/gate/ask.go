package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"time"
)

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
