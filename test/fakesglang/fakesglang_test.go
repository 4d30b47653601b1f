package fakesglang

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	launch := []string{"-m", "sglang.launch_server", "--model-path", "/models/qwen", "--host", "0.0.0.0",
		"--port", "30001", "--tp", "8", "--quantization", "modelopt_fp4", "--attention-backend", "triton",
		"--moe-runner-backend", "flashinfer_cutlass", "--enable-metrics", "--trust-remote-code"}
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		want  Config
		error string
	}{
		{"good launch", append(launch, "--fp4-gemm-backend", "flashinfer_cutlass"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", Mode: ModeGood}, ""},
		{"default broken flag", append(launch, "--fp4-gemm-backend", "flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", Mode: ModeBang,
				BrokenBy: "--fp4-gemm-backend=flashinfer_cudnn"}, ""},
		{"equals form", append(launch, "--fp4-gemm-backend=flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", Mode: ModeBang,
				BrokenBy: "--fp4-gemm-backend=flashinfer_cudnn"}, ""},
		{"own broken-if and mode", append(launch, "--fake-broken-if", "moe-runner-backend=flashinfer_cutlass",
			"--fake-broken-mode", "nan", "--fp4-gemm-backend", "flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", Mode: ModeNaN,
				BrokenBy: "--moe-runner-backend=flashinfer_cutlass"}, ""},
		{"broken-if none", append(launch, "--fake-broken-if", "none", "--fp4-gemm-backend", "flashinfer_cudnn"), nil,
			Config{Host: "0.0.0.0", Port: "30001", Model: "/models/qwen", Mode: ModeGood}, ""},
		{"served name, env mode", []string{"--served-model-name", "qwen3.5", "--model-path", "/m"},
			map[string]string{"SGLANG_FAKE_MODE": "plus"},
			Config{Host: "127.0.0.1", Port: "30000", Model: "qwen3.5", Mode: ModePlus}, ""},
		{"flag beats env", []string{"--fake-mode", "hang"}, map[string]string{"SGLANG_FAKE_MODE": "plus"},
			Config{Host: "127.0.0.1", Port: "30000", Model: "default", Mode: ModeHang}, ""},
		{"crash-after", []string{"--fake-mode", "crash-after=1.5s", "--fake-ready-after", "2"}, nil,
			Config{Host: "127.0.0.1", Port: "30000", Model: "default", Mode: ModeCrashAfter,
				CrashAfter: 1500 * time.Millisecond, ReadyAfter: 2 * time.Second}, ""},
		{"port file, no health_generate", []string{"--port", "0", "--fake-port-file", "/tmp/p", "--fake-no-health-generate"}, nil,
			Config{Host: "127.0.0.1", Port: "0", Model: "default", Mode: ModeGood, PortFile: "/tmp/p", NoHealthGenerate: true}, ""},
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
