package gate

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// runCase runs one case: one request, several at once (load, samples, generated
// questions, a needle's contexts), prefix-cache pairs, a soak, or a sweep (accuracy).
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
