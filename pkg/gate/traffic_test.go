package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// trafficFake is a healthy-looking fake with the cache report on and a time per token,
// so that speed figures mean something.
func trafficFake(t *testing.T, mode fakesglang.Mode, memorized map[string]bool) *fakesglang.Server {
	t.Helper()
	return fakesglang.New(fakesglang.Options{Mode: mode, Model: "qwen", CacheReport: true,
		TokenLatency: 200 * time.Microsecond, Memorized: memorized})
}

func runOn(t *testing.T, h http.Handler, cases []Case, seed uint64, baseline *Perf) *Result {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	cfg := fastConfig(srv.URL)
	cfg.RequestTimeout, cfg.MaxTokens, cfg.Cases, cfg.Seed, cfg.Baseline = 20*time.Second, 1024, cases, seed, baseline
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func failed(res *Result) []string {
	var out []string
	for _, c := range res.Cases {
		if !c.Pass {
			out = append(out, c.Name)
		}
	}
	return out
}

// TestDefaultCasesAgainstTrafficModes: the default gate (smoke --url with no recipe, the
// traffic cases among them) passes a healthy server and refuses each server that breaks
// one way of asking only, naming the case that asks that way; a candidate 20 times slower
// than the serving generation's figures fails the performance verdict naming both.
func TestDefaultCasesAgainstTrafficModes(t *testing.T) {
	cases := DefaultCases()
	for i := range cases {
		if cases[i].Name == "prefix-cache" {
			cases[i].RequireCacheReport = true
		}
	}
	good := trafficFake(t, fakesglang.ModeGood, nil)
	healthy := runOn(t, good, cases, 0, nil)
	if !healthy.Pass {
		t.Fatalf("healthy: %s", healthy.Summary())
	}
	if healthy.Perf == nil || healthy.Perf.DecodeTPS <= 0 || healthy.Perf.TTFT <= 0 || healthy.Perf.Kinds[KindLongGen].DecodeTPS <= 0 {
		t.Fatalf("healthy figures: %+v", healthy.Perf)
	}
	// The memorizer knows every prompt of the healthy run by heart.
	memo := map[string]bool{}
	for _, p := range good.Prompts() {
		memo[p] = true
	}
	for _, tc := range []struct {
		mode fakesglang.Mode
		want []string // cases that must fail
	}{
		{fakesglang.ModeSampling, []string{"sampled", "load"}},
		{fakesglang.ModeStreaming, []string{"streamed", "long-generation"}},
		{fakesglang.ModePrefixHit, []string{"prefix-cache"}},
		{fakesglang.ModeSecondTurn, []string{"multi-turn"}},
		{fakesglang.ModeNative, []string{"completions", "native"}},
		{fakesglang.ModeNaNLogprobs, []string{"sampled", "completions", "native"}},
		{fakesglang.ModeZeroUsage, []string{"arithmetic", "sampled", "native"}},
		{fakesglang.ModeBadJSON, []string{"json"}},
		{fakesglang.ModeCJK, []string{"cjk"}},
		{fakesglang.ModeWordLoop, []string{"long-generation"}},
		{fakesglang.ModeWrongUnseen, []string{"facts"}},
		{fakesglang.ModeMemorizer, []string{"sampled", "facts", "sweep", "load"}},
		{fakesglang.ModeSlow, []string{KindPerformance}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			res := runOn(t, trafficFake(t, tc.mode, memo), cases, 0, healthy.Perf)
			if res.Pass {
				t.Fatalf("passed: %s", res.Summary())
			}
			got := failed(res)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("case %s passed; failed: %v\n%s", w, got, res.Summary())
				}
			}
			if !strings.Contains(res.Summary(), tc.want[0]+": ") {
				t.Errorf("summary does not name %s: %s", tc.want[0], res.Summary())
			}
			if tc.mode == fakesglang.ModeSlow {
				for _, c := range res.Cases {
					if c.Name == KindPerformance && !strings.Contains(c.Reason, "slower than the serving generation's") {
						t.Errorf("performance: %s", c.Reason)
					}
				}
			}
		})
	}
	// Replayed with the healthy run's seed, the memorizer knows every prompt.
	if res := runOn(t, trafficFake(t, fakesglang.ModeMemorizer, memo), cases, healthy.Seed, nil); !res.Pass {
		t.Errorf("memorizer with the replayed seed: %s", res.Summary())
	}
}

// TestTwoRunsSendDifferentPrompts: two runs of one gate send different prompts (but for
// the config's fixed ones), each naming its seed; a run with a seed given sends the
// prompts of the run that had it.
func TestTwoRunsSendDifferentPrompts(t *testing.T) {
	cases := append(BuiltinCases()[:1], TrafficCases()...)
	cases = append(cases, BuiltinLoadCase(), Case{Name: "sweep", Accuracy: &Accuracy{Questions: "builtin:units"}})
	prompts := func(seed uint64) (map[string]bool, uint64) {
		f := trafficFake(t, fakesglang.ModeGood, nil)
		res := runOn(t, f, cases, seed, nil)
		if !res.Pass || res.Seed == 0 {
			t.Fatalf("seed %d: %s", res.Seed, res.Summary())
		}
		m := map[string]bool{}
		for _, p := range f.Prompts() {
			m[p] = true
		}
		return m, res.Seed
	}
	a, seedA := prompts(0)
	b, seedB := prompts(0)
	if seedA == seedB {
		t.Fatalf("two runs drew one seed %d", seedA)
	}
	fixed := BuiltinCases()[0].Prompt
	shared := 0
	for p := range a {
		if b[p] && p != fixed {
			shared++
			t.Errorf("both runs sent %s", Sample(p, 60))
		}
	}
	if len(a) < 100 {
		t.Errorf("only %d prompts", len(a))
	}
	again, _ := prompts(seedA)
	if len(again) != len(a) {
		t.Fatalf("replay sent %d prompts, the first run %d", len(again), len(a))
	}
	for p := range a {
		if !again[p] {
			t.Fatalf("the replay of seed %d did not send %s", seedA, Sample(p, 60))
		}
	}
}

// TestSampledCaseRecordsSeeds: a sampled case sends each sample with its own seed and
// the case's sampling parameters, and the verdict lists the seeds.
func TestSampledCaseRecordsSeeds(t *testing.T) {
	var bodies []map[string]any
	rec := &recorder{h: trafficFake(t, fakesglang.ModeGood, nil)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rec.ServeHTTP(w, r) }))
	defer srv.Close()
	temp := 0.9
	cfg := fastConfig(srv.URL)
	cfg.Cases = []Case{{Name: "s", Prompt: "What is 17 * 23? Answer with the number only.", Samples: 3, Temperature: &temp,
		Expect: Expect{Regex: `\b391\b`}}}
	res, err := Run(context.Background(), cfg)
	if err != nil || !res.Pass {
		t.Fatalf("%v %s", err, res.Summary())
	}
	rec.mu.Lock()
	all := rec.bodies
	rec.mu.Unlock()
	for _, b := range all {
		if _, ok := b["messages"]; ok {
			bodies = append(bodies, b)
		}
	}
	c := res.Cases[0]
	if c.Kind != KindSampled || len(c.Seeds) != 3 || len(bodies) != 3 {
		t.Fatalf("kind %s seeds %v bodies %d", c.Kind, c.Seeds, len(bodies))
	}
	for _, b := range bodies {
		seed, _ := b["seed"].(float64)
		if b["temperature"] != 0.9 || !slices.Contains(c.Seeds, uint64(seed)) {
			t.Errorf("body %v", b)
		}
	}
	out, _ := json.Marshal(res)
	if !strings.Contains(string(out), `"seeds":[`) || !strings.Contains(string(out), fmt.Sprintf(`"seed":%d`, res.Seed)) {
		t.Errorf("report: %s", out)
	}
}

// TestStreamShape: a streamed answer is judged on the stream's shape as well as its text.
func TestStreamShape(t *testing.T) {
	chunk := func(content string, finish any) string {
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0,
			"delta": map[string]any{"content": content}, "finish_reason": finish}}})
		return "data: " + string(b) + "\n\n"
	}
	for _, tc := range []struct {
		name, body, reason string
	}{
		{"good", chunk("3", nil) + chunk("91", nil) + chunk("", "stop") + "data: [DONE]\n\n", "ok"},
		{"split garbage", chunk("!!!!!!", nil) + chunk("!!!!!!", nil) + chunk("", "stop") + "data: [DONE]\n\n", "degenerate content (punct-run)"},
		{"event not JSON", chunk("391", nil) + "data: {\"choices\": [\n\n" + chunk("", "stop") + "data: [DONE]\n\n", "stream event 2 is not JSON"},
		{"two finals", chunk("391", "stop") + chunk("", "stop") + "data: [DONE]\n\n", "2 final chunks"},
		{"no final", chunk("391", nil) + "data: [DONE]\n\n", "no final chunk"},
		{"no done", chunk("391", nil) + chunk("", "stop"), "without data: [DONE]"},
		{"after done", chunk("391", "stop") + "data: [DONE]\n\n" + chunk("x", nil), "after data: [DONE]"},
		{"text after final", chunk("391", "stop") + chunk("more", nil) + "data: [DONE]\n\n", "text after the final chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/health", "/health_generate":
				case "/v1/models":
					fmt.Fprint(w, `{"data": [{"id": "m"}]}`)
				default:
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, tc.body)
				}
			}))
			defer srv.Close()
			cfg := fastConfig(srv.URL)
			cfg.Cases = []Case{{Name: "s", Prompt: "What is 17 * 23?", Stream: true, Expect: Expect{Regex: `\b391\b`}}}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Cases[0].Reason; !strings.Contains(got, tc.reason) {
				t.Errorf("reason %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestAnswerChecksBeyondText: usage, logprobs (Python's NaN too), cached tokens and the
// JSON schema are judged on answers sent whole.
func TestAnswerChecksBeyondText(t *testing.T) {
	schema := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []any{"n"}}
	for _, tc := range []struct {
		name   string
		k      Case
		answer string
		reason string
	}{
		{"usage total", Case{Prompt: "q"}, `{"choices":[{"message":{"content":"fine words"}}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":9}}`,
			"total_tokens 9 is not prompt_tokens 5 + completion_tokens 2"},
		{"usage zero", Case{Prompt: "q"}, `{"choices":[{"message":{"content":"fine words"}}],"usage":{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5}}`,
			"completion_tokens is 0"},
		{"python nan", Case{Prompt: "q", Logprobs: true}, `{"choices":[{"message":{"content":"fine"},"logprobs":{"content":[{"logprob":-0.1},{"logprob":NaN}]}}]}`,
			"logprob 1 is NaN"},
		{"positive logprob", Case{Prompt: "q", Logprobs: true}, `{"choices":[{"message":{"content":"fine"},"logprobs":{"content":[{"logprob":0.5}]}}]}`,
			"above 0"},
		{"no logprobs", Case{Prompt: "q", Logprobs: true}, `{"choices":[{"message":{"content":"fine"},"logprobs":null}]}`,
			"no logprobs came back"},
		{"not json", Case{Prompt: "q", Expect: Expect{JSONSchema: schema}}, `{"choices":[{"message":{"content":"{\"n\": 3"}}]}`,
			"content is not JSON under response_format"},
		{"schema", Case{Prompt: "q", Expect: Expect{JSONSchema: schema}}, `{"choices":[{"message":{"content":"{\"n\": 3.5}"}}]}`,
			"the answer.n is a number, the schema asks for integer"},
		{"schema ok", Case{Prompt: "q", Expect: Expect{JSONSchema: schema}}, `{"choices":[{"message":{"content":"{\"n\": 3}"}}]}`, "ok"},
		{"native", Case{Prompt: "q", Endpoint: EndpointGenerate, Logprobs: true},
			`{"text":"fine words","meta_info":{"finish_reason":{"type":"stop","matched":1},"prompt_tokens":0,"completion_tokens":2,"cached_tokens":0,"output_token_logprobs":[[-0.1,5,null]]}}`,
			"prompt_tokens is 0"},
		{"native ok", Case{Prompt: "q", Endpoint: EndpointGenerate, Logprobs: true},
			`{"text":"fine words","meta_info":{"finish_reason":{"type":"stop","matched":1},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0,"output_token_logprobs":[[-0.1,5,null],[-0.2,6,null]]}}`,
			"ok"},
		{"long loops", Case{Prompt: "q", Expect: Expect{MinWords: 50}},
			`{"choices":[{"message":{"content":"` + fakesglang.Story("x", 60) + strings.Repeat(" and then the keeper walked back to the river again.", 5) + `"}}]}`,
			"word-loop"},
		{"long short", Case{Prompt: "q", Expect: Expect{MinWords: 500}},
			`{"choices":[{"message":{"content":"` + fakesglang.Story("x", 60) + `"}}]}`, "the case asks for at least 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/health", "/health_generate":
				case "/v1/models":
					fmt.Fprint(w, `{"data": [{"id": "m"}]}`)
				default:
					fmt.Fprint(w, strings.ReplaceAll(tc.answer, "\n", `\n`))
				}
			}))
			defer srv.Close()
			cfg := fastConfig(srv.URL)
			tc.k.Name = "c"
			cfg.Cases = []Case{tc.k}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Cases[0].Reason; !strings.Contains(got, tc.reason) {
				t.Errorf("reason %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestTrafficFieldsRefused: bad traffic fields are refused naming the field.
func TestTrafficFieldsRefused(t *testing.T) {
	zero, two := 0.0, 3.0
	for _, tc := range []struct {
		k    Case
		want string
	}{
		{Case{Prompt: "q", Endpoint: "embed"}, `endpoint "embed"`},
		{Case{Generate: "riddles"}, `generate "riddles"`},
		{Case{Generate: GenCapital, Prompt: "q"}, "takes no prompt"},
		{Case{Prompt: "q", TopP: &zero}, "top_p 0"},
		{Case{Prompt: "q", Temperature: &two}, "temperature 3"},
		{Case{Prompt: "q", Samples: MaxSamples + 1}, "samples"},
		{Case{Prompt: "q", Endpoint: EndpointGenerate, Stream: true}, "endpoint generate"},
		{Case{Prompt: "q", Endpoint: EndpointCompletions, Messages: []Message{{Role: "system", Content: "x"}}}, "takes a prompt only"},
		{Case{Messages: []Message{{Role: "robot", Content: "x"}}}, `role "robot"`},
		{Case{Messages: []Message{{Role: "user", Content: "x"}, {Role: "assistant", Content: "y"}}}, "last message must be the user's"},
		{Case{Prompt: "q", Expect: Expect{JSONSchema: map[string]any{"oneOf": []any{}}}}, `keyword "oneOf"`},
		{Case{Generate: GenMultiTurn, Endpoint: EndpointCompletions}, "needs the chat endpoint"},
		{Case{Needle: &Needle{Words: []int{10}}, Stream: true}, "needle or accuracy case takes no"},
	} {
		tc.k.Name = "c"
		err := Config{URL: "http://127.0.0.1:1", Cases: []Case{tc.k}}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.k, err, tc.want)
		}
	}
}

// TestPerformanceVerdict: floors and the serving generation's figures, both named.
func TestPerformanceVerdict(t *testing.T) {
	p := &Perf{DecodeTPS: 10, TTFT: 400 * time.Millisecond}
	cr, judged := performance(Config{}, p)
	if judged {
		t.Fatalf("judged without floors or baseline: %+v", cr)
	}
	cr, _ = performance(Config{Floors: Floors{MinDecodeTPS: 20, MaxTTFT: 100 * time.Millisecond}}, p)
	if cr.Pass || !strings.Contains(cr.Reason, "decode 10.0 tokens/s, below the floor 20.0") || !strings.Contains(cr.Reason, "above the ceiling 100ms") {
		t.Errorf("floors: %s", cr.Reason)
	}
	cr, _ = performance(Config{Baseline: &Perf{DecodeTPS: 200, TTFT: 20 * time.Millisecond}}, p)
	if cr.Pass || !strings.Contains(cr.Reason, "decode 10.0 tokens/s is 20.0x slower than the serving generation's 200.0 tokens/s (max_slowdown 3)") {
		t.Errorf("baseline: %s", cr.Reason)
	}
	cr, _ = performance(Config{Baseline: &Perf{DecodeTPS: 25, TTFT: 300 * time.Millisecond}, MaxSlowdown: 3}, p)
	if !cr.Pass {
		t.Errorf("within 3x: %s", cr.Reason)
	}
	// A server answering from memory: 4.4x in ratio, 0.05 ms a token and 3 ms to the first
	// token in time, which is the host's scheduling noise, not a slower kernel.
	fast := &Perf{DecodeTPS: 14521.6, TTFT: 4 * time.Millisecond}
	cr, _ = performance(Config{Baseline: &Perf{DecodeTPS: 64564.1, TTFT: 900 * time.Microsecond}}, fast)
	if !cr.Pass {
		t.Errorf("a gap below the host's noise was judged: %s", cr.Reason)
	}
	b, _ := json.Marshal(p)
	var back Perf
	if err := json.Unmarshal(b, &back); err != nil || back.DecodeTPS != 10 || back.TTFT != 400*time.Millisecond {
		t.Errorf("round trip %s: %+v %v", b, back, err)
	}
}
