package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// recorder wraps a handler and keeps the paths and chat bodies it saw.
type recorder struct {
	h      http.Handler
	mu     sync.Mutex
	paths  []string
	bodies []map[string]any
	auth   []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.paths = append(r.paths, req.URL.Path)
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	if req.URL.Path == "/v1/chat/completions" {
		b, _ := io.ReadAll(req.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		r.bodies = append(r.bodies, m)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	r.mu.Unlock()
	r.h.ServeHTTP(w, req)
}

func (r *recorder) saw(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.paths {
		if p == path {
			n++
		}
	}
	return n
}

func fake(t *testing.T, opts fakesglang.Options) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{h: fakesglang.New(opts)}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return srv, rec
}

func fastConfig(url string) Config {
	return Config{URL: url, ReadyTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second,
		PollInitial: 5 * time.Millisecond, PollMax: 20 * time.Millisecond, MaxTokens: 200, Cases: BuiltinCases()}
}

func TestRunAgainstModes(t *testing.T) {
	tests := []struct {
		mode   fakesglang.Mode
		pass   bool
		reason string // substring of every failing case's reason
	}{
		{fakesglang.ModeGood, true, ""},
		{fakesglang.ModeBang, false, "degenerate reasoning_content (punct-run): '!' repeated 200 times"},
		{fakesglang.ModePlus, false, "degenerate content (punct-run): '+' repeated"},
		{fakesglang.ModeCommaBang, false, "degenerate content (punct-run): '!' repeated"},
		{fakesglang.ModeApostropheS, false, `degenerate content (repeat-ngram): "'s" repeated`},
		{fakesglang.ModeNaN, false, `matched_stop "NaN happened"`},
		{fakesglang.ModeAbort, false, "finish_reason abort"},
		{fakesglang.ModeEmpty, false, "empty answer: content and reasoning_content are both empty"},
		{fakesglang.ModeWrong, false, "content "},
		{fakesglang.ModeThinkCutoff, false, "answer cut off while reasoning"},
		{fakesglang.ModeHTTP500, false, "HTTP 500: "},
		{fakesglang.ModeSlowReady, true, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			t.Parallel()
			srv, _ := fake(t, fakesglang.Options{Mode: tt.mode, Model: "qwen3.5-397b",
				ReadyAfter: 30 * time.Millisecond})
			res, err := Run(context.Background(), fastConfig(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			if res.Pass != tt.pass {
				t.Fatalf("pass = %v, want %v: %s", res.Pass, tt.pass, res.Summary())
			}
			if !res.Ready || res.Model != "qwen3.5-397b" || len(res.Cases) != len(BuiltinCases()) {
				t.Fatalf("ready %v model %q cases %d", res.Ready, res.Model, len(res.Cases))
			}
			if res.TimeToReady <= 0 || res.TimeToReady > time.Second {
				t.Errorf("time to ready %s", res.TimeToReady)
			}
			for _, c := range res.Cases {
				if c.Pass != tt.pass {
					t.Errorf("case %s: pass %v: %s", c.Name, c.Pass, c.Reason)
				}
				if !tt.pass && !strings.Contains(c.Reason, tt.reason) {
					t.Errorf("case %s: reason %q, want it to contain %q", c.Name, c.Reason, tt.reason)
				}
				if tt.pass && c.Reason != "ok" {
					t.Errorf("case %s: reason %q", c.Name, c.Reason)
				}
				if len([]rune(c.Sample)) > SampleRunes+3 {
					t.Errorf("case %s: sample too long: %s", c.Name, c.Sample)
				}
			}
		})
	}
}

func TestSeedPrimeCase(t *testing.T) {
	prime := []Case{{Name: "prime", Prompt: "Write a Python function to check if a number is prime. Be concise.",
		Expect: Expect{Regex: `def \w+\(`}}}
	for _, tt := range []struct {
		mode fakesglang.Mode
		pass bool
	}{{fakesglang.ModeGood, true}, {fakesglang.ModeBang, false}} {
		t.Run(string(tt.mode), func(t *testing.T) {
			srv, _ := fake(t, fakesglang.Options{Mode: tt.mode})
			cfg := fastConfig(srv.URL)
			cfg.Cases = prime
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Pass != tt.pass {
				t.Fatalf("%s", res.Summary())
			}
			if !tt.pass && !strings.HasPrefix(res.Cases[0].Sample, `"!!!!`) {
				t.Errorf("sample %s, want the bangs", res.Cases[0].Sample)
			}
		})
	}
}

func TestReadinessFallsBackToHealth(t *testing.T) {
	srv, rec := fake(t, fakesglang.Options{NoHealthGenerate: true, ReadyAfter: 40 * time.Millisecond})
	d, err := WaitReady(context.Background(), fastConfig(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("time to ready %s", d)
	}
	if rec.saw("/health_generate") != 1 {
		t.Errorf("/health_generate asked %d times, want once (then /health)", rec.saw("/health_generate"))
	}
	if rec.saw("/health") < 2 {
		t.Errorf("/health asked %d times, want polls", rec.saw("/health"))
	}
}

func TestReadinessUsesHealthGenerate(t *testing.T) {
	srv, rec := fake(t, fakesglang.Options{})
	if _, err := WaitReady(context.Background(), fastConfig(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if rec.saw("/health") != 0 || rec.saw("/health_generate") != 1 {
		t.Errorf("paths %v", rec.paths)
	}
}

func TestReadyTimeout(t *testing.T) {
	srv, _ := fake(t, fakesglang.Options{Mode: fakesglang.ModeNeverReady})
	cfg := fastConfig(srv.URL)
	cfg.ReadyTimeout = 150 * time.Millisecond
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("took %s for a 150ms ready timeout", el)
	}
	if res.Pass || res.Ready || len(res.Cases) != 0 {
		t.Fatalf("%+v", res)
	}
	if want := "not ready after 150ms (last: /health_generate: HTTP 503)"; res.Reason != want {
		t.Errorf("reason %q, want %q", res.Reason, want)
	}
}

func TestReadyTimeoutNothingListening(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	cfg := fastConfig(url)
	cfg.ReadyTimeout = 100 * time.Millisecond
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pass || !strings.Contains(res.Reason, "not ready after 100ms") || !strings.Contains(res.Reason, "refused") {
		t.Errorf("reason %q", res.Reason)
	}
}

func TestFailedCallbackEndsWait(t *testing.T) {
	srv, _ := fake(t, fakesglang.Options{Mode: fakesglang.ModeNeverReady})
	cfg := fastConfig(srv.URL)
	cfg.ReadyTimeout = 30 * time.Second
	calls := 0
	cfg.Failed = func(context.Context) (bool, string, error) {
		calls++
		if calls < 3 {
			return false, "", nil
		}
		return true, "sglang-qwen.service: Main process exited, code=exited, status=1/FAILURE\nRuntimeError: CUDA error", nil
	}
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("wait took %s; a failed unit must end it at once", el)
	}
	if res.Pass || res.Ready {
		t.Fatal("passed")
	}
	for _, want := range []string{"service failed while waiting for readiness", "status=1/FAILURE", "RuntimeError"} {
		if !strings.Contains(res.Reason, want) {
			t.Errorf("reason %q lacks %q", res.Reason, want)
		}
	}
}

func TestHangVersusRequestTimeout(t *testing.T) {
	srv, _ := fake(t, fakesglang.Options{Mode: fakesglang.ModeHang})
	cfg := fastConfig(srv.URL)
	cfg.RequestTimeout = 80 * time.Millisecond
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("took %s", el)
	}
	if res.Pass || !res.Ready {
		t.Fatalf("%s", res.Summary())
	}
	for _, c := range res.Cases {
		if c.Reason != "no answer within the request timeout (80ms)" {
			t.Errorf("case %s: %q", c.Name, c.Reason)
		}
		// The request's deadline starts as the request is made, a little before the case's
		// clock on a loaded machine: allow that much.
		if c.Latency < 60*time.Millisecond {
			t.Errorf("case %s: latency %s", c.Name, c.Latency)
		}
	}
}

// TestCasesTimeout: a server that is ready and never answers chat costs CasesTimeout for
// the whole run: the request in flight ends when it runs out and the later cases are not
// run, each saying why.
func TestCasesTimeout(t *testing.T) {
	srv, rec := fake(t, fakesglang.Options{Mode: fakesglang.ModeHang})
	cfg := fastConfig(srv.URL)
	cfg.RequestTimeout, cfg.CasesTimeout = 10*time.Second, 200*time.Millisecond
	cfg.Cases = BuiltinSet()
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %s, want about the 200ms budget", el)
	}
	if res.Pass || len(res.Cases) != len(cfg.Cases) {
		t.Fatalf("%s", res.Summary())
	}
	if c := res.Cases[0]; c.Reason != "no answer before the cases' time budget (cases_timeout 200ms) was spent" {
		t.Errorf("first case: %q", c.Reason)
	}
	for _, c := range res.Cases[1:] {
		if c.Pass || c.Reason != "not run: the cases' time budget (cases_timeout 200ms) was spent" {
			t.Errorf("case %s: %v %q", c.Name, c.Pass, c.Reason)
		}
	}
	if n := rec.saw("/v1/chat/completions"); n != 1 {
		t.Errorf("%d chat requests, want 1", n)
	}
}

func TestRequestShape(t *testing.T) {
	srv, rec := fake(t, fakesglang.Options{Model: "served"})
	cfg := fastConfig(srv.URL)
	cfg.Model = "explicit"
	cfg.APIKey = "sk-secret-token"
	cfg.MaxTokens = 77
	cfg.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pass || res.Model != "explicit" {
		t.Fatalf("%s", res.Summary())
	}
	if rec.saw("/v1/models") != 0 {
		t.Error("asked /v1/models although the model was given")
	}
	b := rec.bodies[0]
	if b["model"] != "explicit" || b["temperature"] != 0.0 || b["max_tokens"] != 77.0 {
		t.Errorf("body %v", b)
	}
	if kw, _ := b["chat_template_kwargs"].(map[string]any); kw["enable_thinking"] != false {
		t.Errorf("chat_template_kwargs %v", b["chat_template_kwargs"])
	}
	msgs, _ := b["messages"].([]any)
	if m, _ := msgs[0].(map[string]any); len(msgs) != 1 || m["role"] != "user" || m["content"] != BuiltinCases()[0].Prompt {
		t.Errorf("messages %v", msgs)
	}
	for _, a := range rec.auth {
		if a != "Bearer sk-secret-token" {
			t.Errorf("authorization %q", a)
		}
	}
	var out bytes.Buffer
	if err := WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(res)
	for _, s := range []string{out.String(), string(js)} {
		if strings.Contains(s, "sk-secret-token") {
			t.Errorf("secret in output: %s", s)
		}
	}
}

func TestURLUserInfoRedacted(t *testing.T) {
	srv, _ := fake(t, fakesglang.Options{Mode: fakesglang.ModeNeverReady})
	cfg := fastConfig(strings.Replace(srv.URL, "http://", "http://admin:hunter2@", 1))
	cfg.ReadyTimeout = 50 * time.Millisecond
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(res)
	var out bytes.Buffer
	_ = WriteTable(&out, res)
	if strings.Contains(string(js)+out.String(), "hunter2") {
		t.Errorf("password in output:\n%s\n%s", js, out.String())
	}
}

// TestAnswerShapes covers answers the fake does not produce: not JSON, no choices,
// matched_stop as a string, an int or null, tool calls only.
func TestAnswerShapes(t *testing.T) {
	tests := []struct {
		name, body string
		pass       bool
		reason     string
	}{
		{"not json", "<html>oops</html>", false, `answer is not JSON: "<html>oops</html>"`},
		{"no choices", `{"choices": []}`, false, "answer has no choices"},
		{"null choices", `{"choices": null}`, false, "answer has no choices"},
		{"matched_stop int", `{"choices":[{"message":{"content":"Paris 391 def f(x):"},"finish_reason":"stop","matched_stop":151645}]}`, true, "ok"},
		{"matched_stop string", `{"choices":[{"message":{"content":"Paris 391 def f(x):"},"finish_reason":"stop","matched_stop":"</s>"}]}`, true, "ok"},
		{"matched_stop null", `{"choices":[{"message":{"content":"Paris 391 def f(x):"},"finish_reason":"stop","matched_stop":null}]}`, true, "ok"},
		{"nan with text", `{"choices":[{"message":{"content":"Paris 391 def f(x):"},"finish_reason":"stop","matched_stop":"NaN happened"}]}`, false, "NaN happened"},
		{"reasoning only, stopped", `{"choices":[{"message":{"content":null,"reasoning_content":"The answer is Paris."},"finish_reason":"stop"}]}`, false, "content empty: the model answered only in reasoning_content"},
		{"tool call", `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, false, "tool call"},
		// Fields of the wrong JSON type are named with the type they have, not reported
		// as an answer that is not JSON.
		{"content a number", `{"choices":[{"message":{"content":391},"finish_reason":"stop"}]}`, false,
			"message.content is a number, not a string or null as the OpenAI chat protocol defines it: \"391\""},
		{"content an object", `{"choices":[{"message":{"content":{"text":"Paris"}},"finish_reason":"stop"}]}`, false,
			"message.content is an object, not a string or null"},
		{"reasoning a list", `{"choices":[{"message":{"content":"Paris 391 def f(x):","reasoning_content":["a"]},"finish_reason":"stop"}]}`, false,
			"message.reasoning_content is a list, not a string or null"},
		{"choices an object", `{"choices":{"message":{"content":"Paris"}}}`, false, "choices is an object, not a list"},
		{"message a string", `{"choices":[{"message":"Paris 391 def f(x):"}]}`, false, "choices[0].message is a string, not an object"},
		{"finish_reason a number", `{"choices":[{"message":{"content":"Paris 391 def f(x):"},"finish_reason":1}]}`, false,
			"finish_reason is a number, not a string or null"},
		{"control characters", `{"choices":[{"message":{"content":"Paris\u0000\u0001\u0002\u0003"},"finish_reason":"stop"}]}`, false, "degenerate content (bad-runes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/chat/completions" {
					_, _ = io.WriteString(w, tt.body)
				}
			}))
			defer srv.Close()
			cfg := fastConfig(srv.URL)
			cfg.Model = "m"
			cfg.Cases = []Case{{Name: "all", Prompt: "q", Expect: Expect{Contains: []string{"paris"}, ContainsAny: []string{"391", "392"}, Regex: `def \w+\(`}}}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Cases[0]
			if c.Pass != tt.pass || !strings.Contains(c.Reason, tt.reason) {
				t.Errorf("pass %v reason %q; want %v %q", c.Pass, c.Reason, tt.pass, tt.reason)
			}
		})
	}
}

func TestExpectations(t *testing.T) {
	tests := []struct {
		name    string
		content string
		exp     Expect
		want    string
	}{
		{"regex ok", "def f(x):", Expect{Regex: `def \w+\(`}, ""},
		{"regex miss", "function f()", Expect{Regex: `def \w+\(`}, `content does not match regex def \w+\(`},
		{"contains case-insensitive", "PARIS", Expect{Contains: []string{"paris"}}, ""},
		{"contains all", "Paris", Expect{Contains: []string{"Paris", "France"}}, `content does not contain "France"`},
		{"contains any", "Lyon", Expect{ContainsAny: []string{"Paris", "Marseille"}}, `content contains none of ["Paris" "Marseille"]`},
		{"nothing expected", "anything", Expect{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unmet(text{head: tt.content, size: int64(len(tt.content))}, tt.exp); got != tt.want {
				t.Errorf("unmet = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no url", Config{}, "want http(s)://host:port"},
		{"no scheme", Config{URL: "127.0.0.1:30000"}, "want http(s)://host:port"},
		{"bad regex", Config{URL: "http://h:1", Cases: []Case{{Name: "a", Prompt: "p", Expect: Expect{Regex: "("}}}}, `case "a": expect.regex`},
		{"dup name", Config{URL: "http://h:1", Cases: []Case{{Name: "a", Prompt: "p"}, {Name: "a", Prompt: "p"}}}, "name used twice"},
		{"no prompt", Config{URL: "http://h:1", Cases: []Case{{Name: "a"}}}, "prompt is empty"},
		{"ok", Config{URL: "https://h:1/"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestWriteTableAndJSON(t *testing.T) {
	srv, _ := fake(t, fakesglang.Options{Mode: fakesglang.ModeBang, Model: "qwen"})
	cfg := fastConfig(srv.URL)
	cfg.Cases = BuiltinCases()[:1]
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CASE", "VERDICT", "arithmetic", "FAIL", `"!!!!!!`,
		"smoke: FAIL: 0/1 cases passed: arithmetic: degenerate reasoning_content (punct-run)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	js, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"url", "model", "pass", "ready", "time_to_ready", "time_to_ready_ms", "cases"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, js)
		}
	}
	c := back["cases"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "pass", "reason", "latency", "latency_ms", "sample", "finish_reason"} {
		if _, ok := c[k]; !ok {
			t.Errorf("case JSON lacks %q: %s", k, js)
		}
	}
}

func TestSample(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, `"abc"`},
		{"abcdef", 3, `"abc"…`},
		{"a\nb\x00", 10, `"a\nb\x00"`},
		{"巴黎是法国", 2, `"巴黎"…`},
	}
	for _, tt := range tests {
		if got := Sample(tt.in, tt.n); got != tt.want {
			t.Errorf("Sample(%q, %d) = %s, want %s", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestAPIKeyEchoRedacted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, "bad key "+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		}
	}))
	defer srv.Close()
	cfg := fastConfig(srv.URL)
	cfg.Model, cfg.APIKey = "m", "sk-echoed"
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Cases[0]
	if strings.Contains(c.Reason, "sk-echoed") || !strings.Contains(c.Reason, `HTTP 401: "bad key [redacted]"`) {
		t.Errorf("reason %q", c.Reason)
	}
}

// TestOwnServer: after readiness, /v1/models must list ServedModel and /get_model_info
// report ModelPath (when the endpoint exists); a mismatch fails the run with both names and
// no case asked.
func TestOwnServer(t *testing.T) {
	tests := []struct {
		name         string
		opts         fakesglang.Options
		served, path string
		want         string // "" for a pass
	}{
		{"match", fakesglang.Options{Model: "qwen", ModelPath: "/models/qwen"}, "qwen", "/models/qwen", ""},
		{"path cleaned", fakesglang.Options{ModelPath: "/models/qwen/"}, "/models/qwen/", "/models//qwen", ""},
		{"no model info endpoint", fakesglang.Options{Model: "qwen", ModelPath: "/models/a", NoModelInfo: true}, "qwen", "/models/b", ""},
		{"other name", fakesglang.Options{Model: "qwen-a", ModelPath: "/models/a"}, "qwen-b", "/models/b",
			`the server at URL serves "qwen-a" (/v1/models), not the recipe's "qwen-b": another server holds the port, or the unit's --served-model-name differs`},
		{"other path", fakesglang.Options{Model: "qwen", ModelPath: "/models/a"}, "qwen", "/models/b",
			`the server at URL loaded model_path "/models/a" (/get_model_info), not the recipe's "/models/b": another server holds the port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, rec := fake(t, tt.opts)
			cfg := fastConfig(srv.URL)
			cfg.ServedModel, cfg.ModelPath = tt.served, tt.path
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if !res.Pass || res.Model != tt.served {
					t.Errorf("%s (model %q)", res.Summary(), res.Model)
				}
				return
			}
			want := strings.ReplaceAll(tt.want, "URL", srv.URL)
			if res.Pass || res.Reason != want || len(res.Cases) != 0 {
				t.Errorf("reason %q, want %q", res.Reason, want)
			}
			if n := rec.saw("/v1/chat/completions"); n != 0 {
				t.Errorf("%d chat requests to a server that is not the recipe's", n)
			}
		})
	}
}

// TestResultOf: the gate's result is read back from a step's details under its own key,
// and details without one give none.
func TestResultOf(t *testing.T) {
	res := &Result{Ready: true}
	if got, ok := ResultOf(map[string]any{DetailKey: res}); !ok || got != res {
		t.Errorf("ResultOf = %v, %v", got, ok)
	}
	for _, d := range []map[string]any{nil, {DetailKey: "text"}, {DetailKey: (*Result)(nil)}} {
		if got, ok := ResultOf(d); ok {
			t.Errorf("ResultOf(%v) = %v, true", d, got)
		}
	}
}
