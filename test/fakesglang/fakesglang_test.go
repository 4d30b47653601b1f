package fakesglang

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sglprov/sglprov/pkg/gate"
	"time"
)

func TestParseConfig(t *testing.T) {
	launch := []string{"-m", "sglang.launch_server", "--model-path", "/models/qwen", "--host", "0.0.0.0",
		"--port", "30001", "--tp", "8", "--quantization", "modelopt_fp4", "--attention-backend", "triton",
		"--moe-runner-backend", "flashinfer_cutlass", "--enable-metrics", "--trust-remote-code",
		"--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder"}
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		want  Config
		error string
	}{
		{"good launch", append(launch, "--fp4-gemm-backend", "flashinfer_cutlass"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", ModelPath: "/models/qwen", Mode: ModeGood}, ""},
		{"default broken flag", append(launch, "--fp4-gemm-backend", "flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", ModelPath: "/models/qwen", Mode: ModeBang,
				BrokenBy: "--fp4-gemm-backend=flashinfer_cudnn"}, ""},
		{"equals form", append(launch, "--fp4-gemm-backend=flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", ModelPath: "/models/qwen", Mode: ModeBang,
				BrokenBy: "--fp4-gemm-backend=flashinfer_cudnn"}, ""},
		{"own broken-if and mode", append(launch, "--fake-broken-if", "moe-runner-backend=flashinfer_cutlass",
			"--fake-broken-mode", "nan", "--fp4-gemm-backend", "flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", ModelPath: "/models/qwen", Mode: ModeNaN,
				BrokenBy: "--moe-runner-backend=flashinfer_cutlass"}, ""},
		{"broken-if none", append(launch, "--fake-broken-if", "none", "--fp4-gemm-backend", "flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", ModelPath: "/models/qwen", Mode: ModeGood}, ""},
		{"served name, env mode", []string{"--served-model-name", "qwen3.5", "--model-path", "/m"},
			map[string]string{"SGLANG_FAKE_MODE": "plus"},
			Config{Host: "127.0.0.1", Port: "30000", Model: "qwen3.5", ModelPath: "/m", Mode: ModePlus, RawToolCalls: true, InlineThink: true}, ""},
		{"flag beats env", []string{"--fake-mode", "hang"}, map[string]string{"SGLANG_FAKE_MODE": "plus"},
			Config{Host: "127.0.0.1", Port: "30000", Model: "default", ModelPath: "default", Mode: ModeHang, RawToolCalls: true, InlineThink: true}, ""},
		{"crash-after", []string{"--fake-mode", "crash-after=1.5s", "--fake-ready-after", "2"}, nil,
			Config{Host: "127.0.0.1", Port: "30000", Model: "default", ModelPath: "default", Mode: ModeCrashAfter,
				CrashAfter: 1500 * time.Millisecond, ReadyAfter: 2 * time.Second, RawToolCalls: true, InlineThink: true}, ""},
		{"port file, no health_generate", []string{"--port", "0", "--fake-port-file", "/tmp/p", "--fake-no-health-generate"}, nil,
			Config{Host: "127.0.0.1", Port: "0", Model: "default", ModelPath: "default", Mode: ModeGood, PortFile: "/tmp/p", NoHealthGenerate: true, RawToolCalls: true, InlineThink: true}, ""},
		{"wrong parsers", []string{"--tool-call-parser", "hermes", "--reasoning-parser", "deepseek-r1"}, nil,
			Config{Host: "127.0.0.1", Port: "30000", Model: "default", ModelPath: "default", Mode: ModeGood, RawToolCalls: true, InlineThink: true}, ""},
		{"crowded under one backend", append(launch, "--fake-broken-if", "fp4-gemm-backend=flashinfer_cutlass",
			"--fake-broken-mode", "crowded", "--fake-crowded-above", "48", "--fake-latency", "30ms",
			"--fp4-gemm-backend", "flashinfer_cutlass"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", ModelPath: "/models/qwen", Mode: ModeCrowded,
				BrokenBy: "--fp4-gemm-backend=flashinfer_cutlass", CrowdedAbove: 48, Latency: 30 * time.Millisecond}, ""},
		{"context length", []string{"--model", "/m", "--context-length", "8192"}, nil,
			Config{Host: "127.0.0.1", Port: "30000", Model: "/m", ModelPath: "/m", ContextLength: 8192, Mode: ModeGood, RawToolCalls: true, InlineThink: true}, ""},
		{"bad context length", []string{"--context-length", "long"}, nil, Config{}, "--context-length"},
		{"bad crowded-above", []string{"--fake-crowded-above", "many"}, nil, Config{}, "--fake-crowded-above"},
		{"bad latency", []string{"--fake-latency", "soon"}, nil, Config{}, "--fake-latency"},
		{"unknown mode", []string{"--fake-mode", "sideways"}, nil, Config{}, `unknown mode`},
		{"bad broken-if", []string{"--fake-broken-if", "nonsense"}, nil, Config{}, "want FLAG=VALUE"},
		{"bad ready-after", []string{"--fake-ready-after", "soon"}, nil, Config{}, "--fake-ready-after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.args, func(k string) string { return tt.env[k] })
			if tt.error != "" {
				if err == nil || !strings.Contains(err.Error(), tt.error) {
					t.Fatalf("err %v, want %q", err, tt.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestGoodAnswer(t *testing.T) {
	tests := map[string]string{
		"What is 17 * 23? Answer with the number only.": "391",
		"What is 2 + 2?":  "4",
		"What is 10 - 3?": "7",
		"What is the capital of France? Answer with one word.":               "Paris",
		"Write a Python function to check if a number is prime. Be concise.": "def is_prime(",
		"Write a short Python function that returns the sum of a list.":      "def total(",
		"Tell me a story.": "test server",
	}
	for prompt, want := range tests {
		if got := GoodAnswer(prompt); !strings.Contains(got, want) {
			t.Errorf("GoodAnswer(%q) = %q, want %q in it", prompt, got, want)
		}
	}
}

func chat(t *testing.T, url string, body string) (int, ChatResponse, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	var cr ChatResponse
	_ = json.Unmarshal(raw.Bytes(), &cr)
	var m map[string]any
	_ = json.Unmarshal(raw.Bytes(), &m)
	return resp.StatusCode, cr, m
}

func TestResponseShape(t *testing.T) {
	var log bytes.Buffer
	var mu sync.Mutex
	srv := httptest.NewServer(New(Options{Mode: ModeBang, Model: "qwen3.5-397b", Log: lockedWriter{&mu, &log}}))
	defer srv.Close()
	code, cr, raw := chat(t, srv.URL, `{"model":"qwen3.5-397b","messages":[{"role":"user","content":"Write a Python function to check if a number is prime. Be concise."}],"max_tokens":200,"temperature":0}`)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	if cr.Object != "chat.completion" || cr.Model != "qwen3.5-397b" || len(cr.ID) != 32 || cr.Created == 0 {
		t.Errorf("envelope %+v", cr)
	}
	msg := raw["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] != nil || msg["reasoning_content"] != strings.Repeat("!", 200) || msg["role"] != "assistant" {
		t.Errorf("message %v", msg)
	}
	if _, ok := msg["tool_calls"]; !ok {
		t.Error("message has no tool_calls field")
	}
	ch := raw["choices"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "finish_reason", "matched_stop", "logprobs"} {
		if _, ok := ch[k]; !ok {
			t.Errorf("choice lacks %q", k)
		}
	}
	if _, ok := raw["usage"].(map[string]any)["completion_tokens"]; !ok {
		t.Error("usage lacks completion_tokens")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), "POST /v1/chat/completions 200") {
		t.Errorf("log %q", log.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestModesAnswer(t *testing.T) {
	tests := []struct {
		mode        Mode
		status      int
		content     any // nil, or the content's prefix
		finish      string
		matchedStop any
	}{
		{ModeGood, 200, "391", "stop", float64(EOSTokenID)},
		{ModePlus, 200, "+++", "length", nil},
		{ModeCommaBang, 200, " , , (!!!", "length", nil},
		{ModeApostropheS, 200, "'s's", "length", nil},
		{ModeNaN, 200, "", "stop", "NaN happened"},
		{ModeAbort, 200, "", "abort", nil},
		{ModeEmpty, 200, "", "stop", float64(EOSTokenID)},
		{ModeWrong, 200, "42", "stop", float64(EOSTokenID)},
		{ModeThinkCutoff, 200, nil, "length", nil},
		{ModeHTTP500, 500, nil, "", nil},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			srv := httptest.NewServer(New(Options{Mode: tt.mode}))
			defer srv.Close()
			code, _, raw := chat(t, srv.URL, `{"messages":[{"role":"user","content":"What is 17 * 23?"}],"max_tokens":16}`)
			if code != tt.status {
				t.Fatalf("status %d, want %d", code, tt.status)
			}
			if code != 200 {
				if raw["object"] != "error" {
					t.Errorf("error body %v", raw)
				}
				return
			}
			ch := raw["choices"].([]any)[0].(map[string]any)
			content := ch["message"].(map[string]any)["content"]
			switch want := tt.content.(type) {
			case nil:
				if content != nil {
					t.Errorf("content %v, want null", content)
				}
			case string:
				if s, _ := content.(string); !strings.HasPrefix(s, want) {
					t.Errorf("content %v, want prefix %q", content, want)
				}
			}
			if ch["finish_reason"] != tt.finish || ch["matched_stop"] != tt.matchedStop {
				t.Errorf("finish %v matched_stop %v", ch["finish_reason"], ch["matched_stop"])
			}
		})
	}
}

func TestHealthAndModels(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	s := New(Options{Mode: ModeSlowReady, ReadyAfter: time.Minute, Model: "m", Now: clock, NoHealthGenerate: true})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/health"); code != 503 {
		t.Errorf("/health before ready: %d", code)
	}
	now = now.Add(time.Minute)
	if code, _ := get("/health"); code != 200 {
		t.Errorf("/health after ready: %d", code)
	}
	if code, _ := get("/health_generate"); code != 404 {
		t.Errorf("/health_generate without it: %d", code)
	}
	code, body := get("/v1/models")
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Data) != 1 || list.Data[0].ID != "m" {
		t.Errorf("/v1/models: %d %s", code, body)
	}
	if code, _ := get("/nope"); code != 404 {
		t.Errorf("unknown path: %d", code)
	}
}

// TestModelsAndModelInfoAsSGLang: /v1/models is SGLang's ModelList (the served model name,
// defaulting to the model path, with max_model_len) and /get_model_info its dict.
func TestModelsAndModelInfoAsSGLang(t *testing.T) {
	get := func(s *Server, path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var m map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &m)
		return rec.Code, m
	}
	now := time.Unix(2000, 0)
	s := New(Options{ModelPath: "/models/qwen", Now: func() time.Time { return now }})
	code, list := get(s, "/v1/models")
	want := map[string]any{"object": "list", "data": []any{map[string]any{"id": "/models/qwen", "object": "model",
		"created": float64(2000), "owned_by": "sglang", "root": "/models/qwen", "max_model_len": float64(DefaultContextLength)}}}
	if code != 200 || fmt.Sprint(list) != fmt.Sprint(want) {
		t.Errorf("/v1/models: %d %v", code, list)
	}
	code, info := get(s, "/get_model_info")
	wantInfo := map[string]any{"model_path": "/models/qwen", "tokenizer_path": "/models/qwen", "is_generation": true,
		"preferred_sampling_params": nil, "weight_version": "default"}
	if code != 200 || fmt.Sprint(info) != fmt.Sprint(wantInfo) {
		t.Errorf("/get_model_info: %d %v", code, info)
	}
	s = New(Options{Model: "qwen3.5", ModelPath: "/m", NoModelInfo: true})
	if _, list := get(s, "/v1/models"); list["data"].([]any)[0].(map[string]any)["id"] != "qwen3.5" {
		t.Errorf("served name: %v", list)
	}
	if code, _ := get(s, "/get_model_info"); code != 404 {
		t.Errorf("/get_model_info with NoModelInfo: %d", code)
	}
	if code, _ := get(s, "/get_server_info"); code != 404 {
		t.Errorf("/get_server_info without server args: %d", code)
	}
	// /server_info (and its deprecated alias /get_server_info): the launch line's flags
	// by SGLang's ServerArgs field names, in Python's JSON forms, the fake's own left out.
	s = New(Options{ServerArgs: ServerArgsOf([]string{"--model-path", "/m", "--tp", "16", "--attention-backend", "triton",
		"--fp4-gemm-backend", "flashinfer_cudnn", "--mem-fraction-static", "1", "--cuda-graph-bs", "1", "2", "4",
		"--enable-metrics", "--fake-mode", "bang"})})
	for _, path := range []string{"/server_info", "/get_server_info"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		body := rec.Body.String()
		for _, want := range []string{`"model_path":"/m"`, `"tp_size":16`, `"attention_backend":"triton"`,
			`"fp4_gemm_runner_backend":"flashinfer_cudnn"`, `"mem_fraction_static":1.0`, `"cuda_graph_bs_decode":[1,2,4]`,
			`"enable_metrics":true`, `"version":"fake"`, `"moe_runner_backend":"auto"`, `"dist_init_addr":null`} {
			if rec.Code != 200 || !strings.Contains(body, want) {
				t.Errorf("%s: %d, want %s in %s", path, rec.Code, want, body)
			}
		}
		for _, not := range []string{`"tp":`, `"fp4_gemm_backend"`, `"fake_mode"`} {
			if strings.Contains(body, not) {
				t.Errorf("%s reports %s: %s", path, not, body)
			}
		}
	}
}

func TestThinkingOff(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	defer srv.Close()
	_, cr, _ := chat(t, srv.URL, `{"messages":[{"role":"user","content":"What is the capital of France?"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	if m := cr.Choices[0].Message; m.ReasoningContent != nil || deref(m.Content) != "Paris" {
		t.Errorf("message %+v", m)
	}
	_, cr, _ = chat(t, srv.URL, `{"messages":[{"role":"user","content":"What is the capital of France?"}]}`)
	if m := cr.Choices[0].Message; m.ReasoningContent == nil {
		t.Error("thinking on by default, but no reasoning_content")
	}
}

func TestMainServesAndStops(t *testing.T) {
	dir := t.TempDir()
	portFile := filepath.Join(dir, "port")
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	var mu sync.Mutex
	done := make(chan int)
	go func() {
		done <- Main(ctx, []string{"-m", "sglang.launch_server", "--model-path", "/m", "--port", "0",
			"--fake-port-file", portFile}, lockedWriter{&mu, &stderr}, func(string) string { return "" })
	}()
	var port string
	for range 200 {
		if b, err := os.ReadFile(portFile); err == nil {
			port = strings.TrimSpace(string(b))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if port == "" {
		t.Fatal("no port file")
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/health_generate")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health %d", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after stop", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(stderr.String(), "fake-sglang: stopped") {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestMainCrashes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		max  time.Duration
	}{
		{"crash", []string{"--fake-mode", "crash", "--port", "0"}, time.Second},
		{"crash-after", []string{"--fake-mode", "crash-after=100ms", "--port", "0"}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			start := time.Now()
			code := Main(context.Background(), tt.args, &stderr, nil)
			if code != 1 || time.Since(start) > tt.max {
				t.Errorf("exit %d after %s", code, time.Since(start))
			}
		})
	}
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--fake-mode", "bogus"}, &stderr, nil); code != 2 {
		t.Errorf("bad mode: exit %d", code)
	}
}

const weatherRequest = `{"messages":[{"role":"user","content":"What is the weather in Paris right now? Use the tool."}],` +
	`"chat_template_kwargs":{"enable_thinking":false},"tools":[{"type":"function","function":{"name":"get_weather",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}`

func TestToolCalls(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	defer srv.Close()
	_, cr, raw := chat(t, srv.URL, weatherRequest)
	ch := cr.Choices[0]
	if len(ch.Message.ToolCalls) != 1 || ch.Message.Content != nil || deref(ch.FinishReason) != "tool_calls" {
		t.Fatalf("parsed: %v", raw)
	}
	if f := ch.Message.ToolCalls[0].Function; f.Name != "get_weather" || f.Arguments != `{"city":"Paris"}` {
		t.Errorf("call %+v", f)
	}

	raw2 := httptest.NewServer(New(Options{RawToolCalls: true}))
	defer raw2.Close()
	_, cr, _ = chat(t, raw2.URL, weatherRequest)
	ch = cr.Choices[0]
	want := "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
	if len(ch.Message.ToolCalls) != 0 || deref(ch.Message.Content) != want {
		t.Errorf("raw: %+v", ch.Message)
	}
	// Without tools, or with tools the prompt does not ask for, the fake answers in text.
	_, cr, _ = chat(t, srv.URL, `{"messages":[{"role":"user","content":"What is 2 + 2?"}],"tools":[{"type":"function","function":{"name":"get_weather"}}]}`)
	if deref(cr.Choices[0].Message.Content) != "4" || len(cr.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("no call wanted: %+v", cr.Choices[0].Message)
	}
}

func TestInlineThink(t *testing.T) {
	srv := httptest.NewServer(New(Options{InlineThink: true}))
	defer srv.Close()
	_, cr, _ := chat(t, srv.URL, `{"messages":[{"role":"user","content":"What is 17 * 23?"}],"chat_template_kwargs":{"enable_thinking":true}}`)
	m := cr.Choices[0].Message
	if m.ReasoningContent != nil || !strings.HasPrefix(deref(m.Content), "<think>\n") || !strings.HasSuffix(deref(m.Content), "</think>\n\n391") {
		t.Errorf("message %+v", m)
	}
	_, cr, _ = chat(t, srv.URL, `{"messages":[{"role":"user","content":"What is 17 * 23?"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	if deref(cr.Choices[0].Message.Content) != "391" {
		t.Errorf("thinking off: %+v", cr.Choices[0].Message)
	}
}

func TestCrowded(t *testing.T) {
	s := New(Options{Mode: ModeCrowded, CrowdedAbove: 4, Latency: 50 * time.Millisecond})
	srv := httptest.NewServer(s)
	defer srv.Close()
	body := `{"messages":[{"role":"user","content":"What is 17 * 23?"}]}`
	if _, cr, _ := chat(t, srv.URL, body); deref(cr.Choices[0].Message.Content) != "391" {
		t.Fatalf("alone: %+v", cr.Choices[0].Message)
	}
	var wg sync.WaitGroup
	contents := make([]string, 8)
	for i := range contents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, cr, _ := chat(t, srv.URL, body)
			contents[i] = deref(cr.Choices[0].Message.Content)
		}()
	}
	wg.Wait()
	bad := 0
	for _, c := range contents {
		if strings.HasPrefix(c, " , , (!!!") {
			bad++
		}
	}
	if bad == 0 || s.Peak() < 5 {
		t.Errorf("8 at once above 4: %d garbage answers, peak %d", bad, s.Peak())
	}
}

func TestFluentWrong(t *testing.T) {
	srv := httptest.NewServer(New(Options{Mode: ModeFluentWrong}))
	defer srv.Close()
	ask := func(q string) string {
		b, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": q}},
			"chat_template_kwargs": map[string]any{"enable_thinking": false}})
		_, cr, _ := chat(t, srv.URL, string(b))
		return deref(cr.Choices[0].Message.Content)
	}
	for q, want := range map[string]string{"What is 17 * 23? Answer with the number only.": "391",
		"What is the capital of France? Answer with one word.": "Paris"} {
		if got := ask(q); got != want {
			t.Errorf("fixed prompt %q: %q", q, got)
		}
	}
	wrong := 0
	for a := 10; a < 70; a++ {
		if ask(fmt.Sprintf("What is %d + 9?", a)) != strconv.Itoa(a+9) {
			wrong++
		}
	}
	if wrong < 10 || wrong > 30 {
		t.Errorf("%d of 60 other questions wrong, want about a third", wrong)
	}
}

func TestGoodAnswerKnowledge(t *testing.T) {
	for prompt, want := range map[string]string{
		"How many centimeters are in 7 meters? Answer with the number only.":         "700",
		"How many seconds are in 3 minutes?":                                         "180",
		"What is the capital of the Czech Republic? Answer with the city name only.": "Prague",
		"What is the capital of New Zealand?":                                        "Wellington",
		"What is 60 - 11? Answer with the number only.":                              "49",
	} {
		if got := GoodAnswer(prompt); got != want {
			t.Errorf("GoodAnswer(%q) = %q, want %q", prompt, got, want)
		}
	}
}

// --fake-broken-while FILE: garbage while FILE exists, read at every request, so that a
// cause fixed on disk is seen without a restart.
func TestBrokenWhile(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "bad")
	cfg, err := ParseConfig([]string{"--fake-broken-while", flag, "--fake-broken-mode", "plus"}, nil)
	if err != nil || cfg.BrokenWhile != flag || cfg.BrokenMode != ModePlus || cfg.Mode != ModeGood {
		t.Fatalf("%+v %v", cfg, err)
	}
	s := New(Options{BrokenWhile: cfg.BrokenWhile, BrokenMode: cfg.BrokenMode})
	content := func() string {
		m, _, _ := s.answer("What is 17 * 23? Answer with the number only.", 8, false, nil, "", trafficReq{context: "What is 17 * 23? Answer with the number only."})
		if m.Content == nil {
			return ""
		}
		return *m.Content
	}
	if got := content(); !strings.Contains(got, "391") {
		t.Errorf("without the file: %q", got)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := content(); got != "++++++++" {
		t.Errorf("with the file: %q", got)
	}
	os.Remove(flag)
	if got := content(); !strings.Contains(got, "391") {
		t.Errorf("the file removed: %q", got)
	}
}

// TestAnswerBytes: with AnswerBytes, a good answer keeps its right start and is padded to
// the size with filler the gate's detectors take for language.
func TestAnswerBytes(t *testing.T) {
	srv := httptest.NewServer(New(Options{AnswerBytes: 1 << 20}))
	defer srv.Close()
	_, cr, _ := chat(t, srv.URL, `{"messages":[{"role":"user","content":"What is 17 * 23?"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	c := deref(cr.Choices[0].Message.Content)
	if len(c) != 1<<20 || !strings.HasPrefix(c, "391 ") {
		t.Fatalf("content of %d bytes starting %.20q", len(c), c)
	}
	if f := gate.Detect(c); f != nil {
		t.Errorf("the filler is degenerate to the gate: %s", f)
	}
	if Filler(100) != Filler(100) || len(Filler(77)) != 77 {
		t.Error("Filler is not fixed or not of the size asked")
	}
}

// TestLongContextAndMixedBatchModes: long-context answers garbage only to a prompt of more
// tokens than the launch line's --chunked-prefill-size (or --fake-long-above); mixed-batch
// only to requests in flight together whose prompts differ by more than the spread.
func TestLongContextAndMixedBatchModes(t *testing.T) {
	cfg, err := ParseConfig([]string{"--fake-mode", "long-context", "--chunked-prefill-size", "100"}, nil)
	if err != nil || cfg.LongAbove != 100 || cfg.Mode != ModeLongContext {
		t.Fatalf("%+v %v", cfg, err)
	}
	if cfg, err := ParseConfig([]string{"--chunked-prefill-size", "100", "--fake-long-above", "50", "--fake-mixed-spread", "7"}, nil); err != nil || cfg.LongAbove != 50 || cfg.MixedSpread != 7 {
		t.Fatalf("%+v %v", cfg, err)
	}
	if _, err := ParseConfig([]string{"--fake-mixed-spread", "x"}, nil); err == nil {
		t.Error("--fake-mixed-spread x accepted")
	}
	ask := func(url, q string) string {
		b, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": q}},
			"chat_template_kwargs": map[string]any{"enable_thinking": false}})
		_, cr, _ := chat(t, url, string(b))
		m := cr.Choices[0].Message
		return deref(m.Content) + deref(m.ReasoningContent)
	}
	long := strings.Repeat("word ", 120) + "Remember this: the secret number is 4242. What is the secret number?"
	srv := httptest.NewServer(New(Options{Mode: ModeLongContext, LongAbove: cfg.LongAbove}))
	defer srv.Close()
	if got := ask(srv.URL, "Remember this: the secret number is 4242. What is the secret number?"); got != "4242" {
		t.Errorf("short prompt: %q", got)
	}
	if got := ask(srv.URL, long); !strings.HasPrefix(got, "!!!!") {
		t.Errorf("long prompt: %q", got)
	}
	mixed := New(Options{Mode: ModeMixedBatch, MixedSpread: 50})
	msrv := httptest.NewServer(mixed)
	defer msrv.Close()
	if got := ask(msrv.URL, long); got != "4242" {
		t.Errorf("long prompt alone: %q", got)
	}
	var wg sync.WaitGroup
	got := make([]string, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := "What is 17 * 23?"
			if i == 0 {
				q = long
			}
			got[i] = ask(msrv.URL, q)
		}()
	}
	wg.Wait()
	for i, g := range got {
		if !strings.HasPrefix(g, " , , (!!!") {
			t.Errorf("request %d of a mixed batch: %q", i, g)
		}
	}
}
