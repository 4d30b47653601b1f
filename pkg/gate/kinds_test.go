package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// fakeServer starts the fake with opts and returns it with a config for the gate.
func fakeServer(t *testing.T, opts fakesglang.Options) (*fakesglang.Server, *recorder, Config) {
	t.Helper()
	if opts.Model == "" {
		opts.Model = "qwen3.5-397b"
	}
	h := fakesglang.New(opts)
	rec := &recorder{h: h}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	cfg := fastConfig(srv.URL)
	cfg.RequestTimeout = 10 * time.Second
	cfg.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	return h, rec, cfg
}

func runOne(t *testing.T, cfg Config, k Case) CaseResult {
	t.Helper()
	cfg.Cases = []Case{k}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cases) != 1 {
		t.Fatalf("%s", res.Summary())
	}
	return res.Cases[0]
}

func caseNamed(t *testing.T, name string) Case {
	t.Helper()
	for _, k := range BuiltinSet() {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("no built-in case %q", name)
	return Case{}
}

// TestLoadCase: the crowded server answers every sequential case right and garbage once
// more than 32 requests are in flight; the load case sends 64 at once, judges each and
// fails it. A good server passes with 64 answers and a latency spread.
func TestLoadCase(t *testing.T) {
	load := caseNamed(t, "load")
	t.Run("good", func(t *testing.T) {
		// Each answer takes long enough that all 64 overlap even on a loaded machine.
		h, _, cfg := fakeServer(t, fakesglang.Options{Latency: 300 * time.Millisecond})
		c := runOne(t, cfg, load)
		if !c.Pass || c.Answers != 64 || c.Failed != 0 || c.Kind != KindLoad {
			t.Fatalf("%+v", c)
		}
		if c.P50 < 300*time.Millisecond || c.P99 < c.P50 {
			t.Errorf("p50 %s p99 %s", c.P50, c.P99)
		}
		if h.Peak() < 33 {
			t.Errorf("only %d requests were in flight at once; the case must send them together", h.Peak())
		}
	})
	t.Run("garbage only when crowded", func(t *testing.T) {
		_, _, cfg := fakeServer(t, fakesglang.Options{Mode: fakesglang.ModeCrowded, Latency: 300 * time.Millisecond})
		cfg.Cases = BuiltinCases()
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Pass {
			t.Fatalf("sequential cases must pass on the crowded server: %s", res.Summary())
		}
		c := runOne(t, cfg, load)
		if c.Pass || c.Answers != 64 || c.Failed == 0 {
			t.Fatalf("%+v", c)
		}
		want := "of 64 answers failed; first: degenerate content (punct-run): '!' repeated"
		if !strings.Contains(c.Reason, want) || !strings.HasPrefix(c.Sample, `" , , (!!!`) {
			t.Errorf("reason %q sample %s; want %q", c.Reason, c.Sample, want)
		}
	})
	t.Run("one bad answer of 64 fails the case", func(t *testing.T) {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			content := "391"
			if n.Add(1) == 40 {
				content = "390"
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{
				"message": map[string]any{"content": content}, "finish_reason": "stop"}}})
		}))
		defer srv.Close()
		cfg := fastConfig(srv.URL)
		cfg.Model = "m"
		c := runOne(t, cfg, Case{Name: "load", Prompt: "What is 17 * 23? Answer with the number only.",
			Concurrency: 64, Expect: Expect{Regex: `\b391\b`}})
		if c.Pass || c.Failed != 1 || c.Reason != `1 of 64 answers failed; first: content does not match regex \b391\b` || c.Sample != `"390"` {
			t.Errorf("%+v", c)
		}
	})
}

// TestToolCallCase: tool_calls parsed by the server pass; the same call left as raw
// <tool_call> text in the content fails, as do wrong arguments, another function, no
// call, and degenerate arguments.
func TestToolCallCase(t *testing.T) {
	tool := caseNamed(t, "tool-call")
	t.Run("good", func(t *testing.T) {
		_, rec, cfg := fakeServer(t, fakesglang.Options{})
		c := runOne(t, cfg, tool)
		if !c.Pass || c.Kind != KindTool || len(c.ToolCalls) != 1 || c.ToolCalls[0].Name != "get_weather" {
			t.Fatalf("%+v", c)
		}
		tools, _ := rec.bodies[0]["tools"].([]any)
		fn, _ := tools[0].(map[string]any)["function"].(map[string]any)
		if len(tools) != 1 || tools[0].(map[string]any)["type"] != "function" || fn["name"] != "get_weather" || fn["parameters"] == nil {
			t.Errorf("tools sent: %v", rec.bodies[0]["tools"])
		}
	})
	t.Run("raw tool-call text", func(t *testing.T) {
		_, _, cfg := fakeServer(t, fakesglang.Options{RawToolCalls: true})
		c := runOne(t, cfg, tool)
		if c.Pass || !strings.Contains(c.Reason, "tool call left as raw <tool_call> text in content") ||
			!strings.Contains(c.Reason, "--tool-call-parser") || !strings.HasPrefix(c.Sample, `"<tool_call>`) {
			t.Errorf("%+v", c)
		}
	})
	answer := func(msg string) Config {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"choices":[{"message":`+msg+`,"finish_reason":"tool_calls"}]}`)
		}))
		t.Cleanup(srv.Close)
		cfg := fastConfig(srv.URL)
		cfg.Model = "m"
		return cfg
	}
	call := func(name, args string) string {
		a, _ := json.Marshal(args)
		return `{"content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"` + name + `","arguments":` + string(a) + `}}]}`
	}
	tests := []struct {
		name, msg, reason string
	}{
		{"wrong city", call("get_weather", `{"city": "London"}`), `arguments of get_weather: city is "London", want "Paris"`},
		{"extra arguments are fine", call("get_weather", `{"city": "Paris", "unit": "celsius"}`), "ok"},
		{"missing argument", call("get_weather", `{"town": "Paris"}`), "arguments of get_weather: city is missing"},
		{"other function", call("get_time", `{}`), "tool_calls names get_time, want get_weather"},
		{"arguments not JSON", call("get_weather", `city=Paris`), "arguments of get_weather are not JSON"},
		{"no call", `{"content":"It is sunny in Paris."}`, "no tool call in tool_calls, want get_weather"},
		{"degenerate arguments", call("get_weather", `{"city": "Paris`+strings.Repeat("!", 40)+`"}`), "degenerate tool call arguments (punct-run): '!' repeated 40 times"},
		// The protocol's arguments are a string holding JSON; an object in its place
		// breaks clients that parse the string.
		{"arguments as an object", `{"content":null,"tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]}`,
			`tool call get_weather: function.arguments is an object, not a string holding JSON as the OpenAI protocol defines it: "{\"city\":\"Paris\"}"`},
		{"arguments as a number", `{"content":null,"tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":7}}]}`,
			"function.arguments is a number, not a string holding JSON"},
		{"arguments absent", `{"content":null,"tool_calls":[{"type":"function","function":{"name":"get_weather"}}]}`,
			"function.arguments is absent, not a string holding JSON"},
		{"raw text beside a parsed call", `{"content":"<tool_call>\n<function=get_weather>","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`, "tool call left as raw <tool_call> text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := runOne(t, answer(tt.msg), tool)
			if (tt.reason == "ok") != c.Pass || !strings.Contains(c.Reason, tt.reason) {
				t.Errorf("pass %v reason %q, want %q", c.Pass, c.Reason, tt.reason)
			}
		})
	}
}

// TestReasoningCase: with thinking on for the case only, a split answer passes; thinking
// left inline between think tags fails, as does an answer without reasoning_content.
func TestReasoningCase(t *testing.T) {
	thinking := caseNamed(t, "thinking")
	t.Run("good", func(t *testing.T) {
		_, rec, cfg := fakeServer(t, fakesglang.Options{})
		cfg.ChatTemplateKwargs = map[string]any{"enable_thinking": false, "other": "kept"}
		c := runOne(t, cfg, thinking)
		if !c.Pass || c.Kind != KindReasoning || c.Sample != `"391"` {
			t.Fatalf("%+v", c)
		}
		b := rec.bodies[0]
		kw, _ := b["chat_template_kwargs"].(map[string]any)
		if kw["enable_thinking"] != true || kw["other"] != "kept" || b["max_tokens"] != 4096.0 {
			t.Errorf("request %v", b)
		}
		if cfg.ChatTemplateKwargs["enable_thinking"] != false {
			t.Error("the case changed the gate's own kwargs")
		}
	})
	t.Run("inline think tags", func(t *testing.T) {
		_, _, cfg := fakeServer(t, fakesglang.Options{InlineThink: true})
		c := runOne(t, cfg, thinking)
		if c.Pass || !strings.Contains(c.Reason, "think tag <think> inline in content") || !strings.Contains(c.Sample, "</think>") {
			t.Errorf("%+v", c)
		}
		// A plain "contains 391" check passes the same answer: that is why the case exists.
		plain := thinking
		plain.Expect = Expect{Regex: `\b391\b`}
		if c := runOne(t, cfg, plain); !c.Pass {
			t.Errorf("plain case: %+v", c)
		}
	})
	t.Run("no reasoning", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"391","reasoning_content":null},"finish_reason":"stop"}]}`)
		}))
		defer srv.Close()
		cfg := fastConfig(srv.URL)
		cfg.Model = "m"
		c := runOne(t, cfg, thinking)
		if c.Pass || !strings.Contains(c.Reason, "reasoning_content is empty") {
			t.Errorf("%+v", c)
		}
	})
}

// TestAccuracyCase: a good server scores 1.0 on every built-in set; the fluent-but-wrong
// server passes every fixed prompt and fails the sweep with its score and first misses;
// a degenerate answer fails the sweep outright.
func TestAccuracyCase(t *testing.T) {
	for _, set := range BuiltinQuestionSets() {
		t.Run("good/"+set, func(t *testing.T) {
			_, _, cfg := fakeServer(t, fakesglang.Options{})
			c := runOne(t, cfg, Case{Name: "sweep", Accuracy: &Accuracy{Questions: "builtin:" + set, Concurrency: 16}})
			if !c.Pass || c.Score == nil || *c.Score != 1 || c.MinScore != DefaultMinScore || c.Answers < 50 || len(c.Misses) != 0 {
				t.Fatalf("%+v", c)
			}
		})
	}
	t.Run("right on the fixed prompts, wrong elsewhere", func(t *testing.T) {
		_, _, cfg := fakeServer(t, fakesglang.Options{Mode: fakesglang.ModeFluentWrong})
		cfg.Cases = BuiltinSet()[:6] // every case but the sweep
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Pass {
			t.Fatalf("fixed prompts: %s", res.Summary())
		}
		c := runOne(t, cfg, caseNamed(t, "sweep"))
		if c.Pass || c.Score == nil || *c.Score > 0.8 || *c.Score < 0.5 || c.Failed != 0 {
			t.Fatalf("%+v", c)
		}
		if len(c.Misses) != MissesShown || !strings.Contains(c.Misses[0].Prompt, "What is ") || c.Misses[0].Got == "" {
			t.Errorf("misses %+v", c.Misses)
		}
		if !strings.Contains(c.Reason, "below the threshold 0.90") {
			t.Errorf("reason %q", c.Reason)
		}
		var out bytes.Buffer
		_ = WriteTable(&out, &Result{URL: "u", Cases: []CaseResult{c}})
		if !strings.Contains(out.String(), "sweep: first misses (score ") || !strings.Contains(out.String(), "  want ") {
			t.Errorf("table:\n%s", out.String())
		}
	})
	t.Run("degenerate answer fails the sweep", func(t *testing.T) {
		_, _, cfg := fakeServer(t, fakesglang.Options{Mode: fakesglang.ModePlus})
		c := runOne(t, cfg, Case{Name: "sweep", Accuracy: &Accuracy{Questions: "builtin:units", Limit: 10}})
		if c.Pass || c.Failed != 10 || c.Answers != 10 || c.Score != nil || !strings.Contains(c.Reason, "10 of 10 answers failed; first: degenerate content") {
			t.Errorf("%+v", c)
		}
	})
	t.Run("jsonl file", func(t *testing.T) {
		_, _, cfg := fakeServer(t, fakesglang.Options{})
		dir := t.TempDir()
		p := filepath.Join(dir, "q.jsonl")
		data := "# two right, one the fake cannot answer\n" +
			`{"prompt": "What is 2 + 2? Answer with the number only.", "answer": 4}` + "\n\n" +
			`{"prompt": "What is the capital of Ukraine?", "answer": ["Kyiv", "Kiev"]}` + "\n" +
			`{"prompt": "Name a colour of the rainbow.", "answer": "red"}` + "\n"
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		c := runOne(t, cfg, Case{Name: "own", Accuracy: &Accuracy{Questions: p, MinScore: 0.6}})
		if !c.Pass || c.Correct != 2 || c.Answers != 3 || len(c.Misses) != 1 || c.Misses[0].Want[0] != "red" {
			t.Errorf("%+v", c)
		}
		cfg.Cases = []Case{{Name: "missing", Accuracy: &Accuracy{Questions: filepath.Join(dir, "nope.jsonl")}}}
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), `case "missing": reading questions`) {
			t.Errorf("missing file: %v", err)
		}
	})
}

// TestGoodCorpusThroughJudge: every good answer of the corpus, judged as a chat answer, a
// load answer, the content of a reasoning answer and a tool call's argument, passes.
func TestGoodCorpusThroughJudge(t *testing.T) {
	good := readCorpus(t, "good")
	for _, name := range sortedKeys(good) {
		text := good[name]
		js, _ := json.Marshal(text)
		for _, tt := range []struct {
			kind string
			body string
			req  request
		}{
			{"chat", `{"choices":[{"message":{"content":` + string(js) + `},"finish_reason":"stop"}]}`, request{}},
			{"reasoning", `{"choices":[{"message":{"content":"391","reasoning_content":` + string(js) + `},"finish_reason":"stop"}]}`,
				request{expect: Expect{Reasoning: true, Regex: `\b391\b`}}},
			{"answer after reasoning", `{"choices":[{"message":{"content":` + string(js) + `,"reasoning_content":"Let me think."},"finish_reason":"stop"}]}`,
				request{expect: Expect{Reasoning: true}}},
		} {
			resp, err := decodeAnswer(strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			var a answer
			judge(&a, resp, tt.req)
			if !a.pass {
				t.Errorf("%s as %s: %s", name, tt.kind, a.reason)
			}
		}
		args, _ := json.Marshal(map[string]string{"city": "Paris", "note": text})
		resp, _ := decodeAnswer(strings.NewReader(`{"choices":[{"message":{"content":null,"tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":` +
			string(mustJSON(string(args))) + `}}]},"finish_reason":"tool_calls"}]}`))
		var a answer
		judge(&a, resp, request{tools: true, expect: Expect{ToolCall: &ToolCallExpect{Name: "get_weather", Arguments: map[string]any{"city": "Paris"}}}})
		if !a.pass {
			t.Errorf("%s as tool-call arguments: %s", name, a.reason)
		}
	}
}

func regexpMatch(pattern, s string) bool {
	return regexp.MustCompile("(?m)" + pattern).MatchString(s)
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

func TestBuiltinQuestionSets(t *testing.T) {
	names := BuiltinQuestionSets()
	if strings.Join(names, ",") != "arithmetic,capitals,units" {
		t.Errorf("sets %v", names)
	}
	for _, n := range names {
		qs, err := BuiltinQuestions(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) < 50 {
			t.Errorf("%s: %d questions, want 50 or more", n, len(qs))
		}
		seen := map[string]bool{}
		for _, q := range qs {
			if seen[q.Prompt] || len(q.Answers) == 0 || q.Answers[0] == "" {
				t.Errorf("%s: %+v (duplicate or no answer)", n, q)
			}
			seen[q.Prompt] = true
			// An echo of the question must never count as the answer.
			if HasAnswer(q.Prompt, q.Answers) {
				t.Errorf("%s: the prompt %q contains its own answer %v", n, q.Prompt, q.Answers)
			}
		}
		again, _ := BuiltinQuestions(n)
		if again[len(again)-1].Prompt != qs[len(qs)-1].Prompt {
			t.Errorf("%s: not the same questions twice", n)
		}
	}
	// Fixed seeds: the sets are the same on every build.
	arith, _ := BuiltinQuestions("arithmetic")
	if arith[0].Prompt != "What is 40 + 34? Answer with the number only." || arith[0].Answers[0] != "74" {
		t.Errorf("first arithmetic question %+v", arith[0])
	}
	if _, err := BuiltinQuestions("trivia"); err == nil || !strings.Contains(err.Error(), "built-in sets: arithmetic, capitals, units") {
		t.Errorf("unknown set: %v", err)
	}
}

func TestHasAnswer(t *testing.T) {
	tests := []struct {
		content string
		answers []string
		want    bool
	}{
		{"391", []string{"391"}, true},
		{"17 * 23 = 391.", []string{"391"}, true},
		{"3910", []string{"391"}, false},
		{"1391", []string{"391"}, false},
		{"The answer is 7,000.", []string{"7000"}, true},
		{"It is 1 234 567", []string{"1234567"}, false},
		{"**Paris**", []string{"paris"}, true},
		{"Parisian", []string{"Paris"}, false},
		{"Kiev", []string{"Kyiv", "Kiev"}, true},
		{"Bogotá", []string{"Bogotá"}, true},
		{"Bogotán", []string{"Bogotá"}, false},
		{"Buenos Aires", []string{"Buenos Aires"}, true},
		{"-5", []string{"5"}, true},
		{"", []string{"4"}, false},
	}
	for _, tt := range tests {
		if got := HasAnswer(tt.content, tt.answers); got != tt.want {
			t.Errorf("HasAnswer(%q, %q) = %v, want %v", tt.content, tt.answers, got, tt.want)
		}
	}
}

func TestParseQuestions(t *testing.T) {
	tests := []struct {
		name, data, err string
	}{
		{"ok", `{"prompt": "p", "answer": "a"}`, ""},
		{"number answer", `{"prompt": "p", "answer": 12.5}`, ""},
		{"not json", `prompt: p`, "q.jsonl:1: want {"},
		{"no prompt", `{"answer": "a"}`, "q.jsonl:1: prompt is empty"},
		{"no answer", "\n" + `{"prompt": "p"}`, "q.jsonl:2: answer is missing"},
		{"empty answer", `{"prompt": "p", "answer": [""]}`, "q.jsonl:1: an answer is empty"},
		{"bad answer", `{"prompt": "p", "answer": {"x": 1}}`, "q.jsonl:1: want {"},
		{"empty file", "# nothing\n", "q.jsonl: no questions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qs, err := ParseQuestions("q.jsonl", []byte(tt.data))
			if tt.err == "" {
				if err != nil || len(qs) != 1 {
					t.Errorf("%v %v", qs, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("err %v, want %q", err, tt.err)
			}
		})
	}
}

func TestValidateKinds(t *testing.T) {
	weather := []Tool{WeatherTool()}
	tests := []struct {
		name string
		k    Case
		want string
	}{
		{"builtin set", caseNamed(t, "sweep"), ""},
		{"accuracy with a prompt", Case{Name: "a", Prompt: "p", Accuracy: &Accuracy{Questions: "builtin:arithmetic"}}, "an accuracy case takes no prompt"},
		{"unknown set", Case{Name: "a", Accuracy: &Accuracy{Questions: "builtin:trivia"}}, `no built-in question set "trivia"`},
		{"no questions", Case{Name: "a", Accuracy: &Accuracy{}}, "accuracy.questions is empty"},
		{"score above 1", Case{Name: "a", Accuracy: &Accuracy{Questions: "builtin:units", MinScore: 90}}, "accuracy.min_score 90: want 0 to 1"},
		{"concurrency too high", Case{Name: "a", Prompt: "p", Concurrency: 5000}, "concurrency 5000: want 1 to 1024"},
		{"tool call not offered", Case{Name: "a", Prompt: "p", Expect: Expect{ToolCall: &ToolCallExpect{Name: "get_time"}}, Tools: weather}, `expect.tool_call.name "get_time" is not among the case's tools`},
		{"tool without a name", Case{Name: "a", Prompt: "p", Tools: []Tool{{}}}, "tools[0]: name"},
		{"tool case", caseNamed(t, "tool-call"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{URL: "http://h:1", Cases: []Case{tt.k}}.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestKindsTableAndJSON: the table shows kind, answers judged and the latency spread;
// report.json carries the same per case.
func TestKindsTableAndJSON(t *testing.T) {
	// Each answer takes long enough that the load case's 64 overlap even on a loaded machine.
	_, _, cfg := fakeServer(t, fakesglang.Options{Mode: fakesglang.ModeCrowded, Latency: 300 * time.Millisecond})
	cfg.Cases = []Case{caseNamed(t, "load"), caseNamed(t, "sweep")}
	cfg.Cases[1].Accuracy.Limit = 20
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CASE  +KIND +VERDICT +ANSWERS +LATENCY +REASON +SAMPLE",
		`load +load +FAIL +64 \(\d+ failed\) +p50 \S+ p99 \S+ +\d+ of 64 answers failed`,
		`sweep +accuracy +PASS +20 +p50 \S+ p99 \S+ +score 1.00 \(20/20 right\), at or above the threshold 0.90`} {
		if !regexpMatch(want, out.String()) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	js, _ := json.Marshal(res)
	var back struct {
		Cases []map[string]any `json:"cases"`
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kind", "pass", "reason", "answers", "failed", "latency_p50_ms", "latency_p99_ms", "sample"} {
		if _, ok := back.Cases[0][k]; !ok {
			t.Errorf("load case JSON lacks %q: %s", k, js)
		}
	}
	for _, k := range []string{"score", "min_score", "correct", "answers"} {
		if _, ok := back.Cases[1][k]; !ok {
			t.Errorf("sweep case JSON lacks %q: %s", k, js)
		}
	}
}

func TestCanaryCase(t *testing.T) {
	set := BuiltinSet()
	if got := CanaryCase(set[3:]); got.Name != "tool-call" {
		t.Errorf("after the load case: %q", got.Name)
	}
	if got := CanaryCase([]Case{caseNamed(t, "load"), caseNamed(t, "sweep")}); got.Name != "arithmetic" || got.Concurrency != 0 {
		t.Errorf("only heavy cases: %+v", got)
	}
	if got := CanaryCase(nil); got.Name != "arithmetic" {
		t.Errorf("none: %q", got.Name)
	}
	// Samples and prefix-cache pairs send several requests: not a canary.
	if got := CanaryCase(TrafficCases()); got.Name != "multi-turn" {
		t.Errorf("traffic cases: %q", got.Name)
	}
}
