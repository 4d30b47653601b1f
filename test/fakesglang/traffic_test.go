package fakesglang

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestNativeAndCompletionShapes: /generate answers SGLang's text and meta_info (finish
// reason object, counts, cached tokens, output_token_logprobs); /v1/completions a
// text_completion with token_logprobs; the cache report shows only when asked for.
func TestNativeAndCompletionShapes(t *testing.T) {
	for _, report := range []bool{false, true} {
		srv := httptest.NewServer(New(Options{CacheReport: report}))
		defer srv.Close()
		q := "Remember this: the first secret number is 12345. The quiet river rests beside the mill. " + strings.Repeat("The green field waits near the tower. ", 20)
		var gen struct {
			Text     string `json:"text"`
			MetaInfo struct {
				FinishReason struct {
					Type string `json:"type"`
				} `json:"finish_reason"`
				PromptTokens, CompletionTokens, CachedTokens int
				OutputTokenLogprobs                          [][]any `json:"output_token_logprobs"`
			} `json:"meta_info"`
		}
		body := `{"text": ` + mustJSON(q+"What is the first secret number given in the text above?") + `, "sampling_params": {"max_new_tokens": 16, "temperature": 0}, "return_logprob": true}`
		_ = json.NewDecoder(post(t, srv.URL+"/generate", body).Body).Decode(&gen)
		body2 := `{"text": ` + mustJSON(q+"What is the first secret number? Answer.") + `, "sampling_params": {"max_new_tokens": 16}}`
		var gen2 map[string]map[string]any
		_ = json.NewDecoder(post(t, srv.URL+"/generate", body2).Body).Decode(&gen2)
		if gen.Text != "12345" || gen.MetaInfo.FinishReason.Type != "stop" || len(gen.MetaInfo.OutputTokenLogprobs) != 1 {
			t.Errorf("generate: %+v", gen)
		}
		if c, _ := gen2["meta_info"]["cached_tokens"].(float64); c < 30 {
			t.Errorf("generate: the second prompt's cached_tokens %v", gen2["meta_info"]["cached_tokens"])
		}
		var comp struct {
			Object  string `json:"object"`
			Choices []struct {
				Text     string `json:"text"`
				Logprobs struct {
					TokenLogprobs []float64 `json:"token_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
		}
		_ = json.NewDecoder(post(t, srv.URL+"/v1/completions", `{"prompt": "What is 17 * 23?", "max_tokens": 8, "logprobs": 1}`).Body).Decode(&comp)
		if comp.Object != "text_completion" || len(comp.Choices) != 1 || comp.Choices[0].Text != "391" || len(comp.Choices[0].Logprobs.TokenLogprobs) != 1 {
			t.Errorf("completions: %+v", comp)
		}
		_, has := comp.Usage["prompt_tokens_details"].(map[string]any)
		if has != report {
			t.Errorf("cache report %v: usage %v", report, comp.Usage)
		}
	}
}

// TestStreamShape: a streamed chat answer is a role chunk, one chunk per token, one final
// chunk, a usage chunk when asked for, and [DONE].
func TestStreamShape(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	defer srv.Close()
	resp := post(t, srv.URL+"/v1/chat/completions", `{"messages": [{"role": "user", "content": "Write a story of about 40 words about a mill."}],
		"stream": true, "stream_options": {"include_usage": true}, "chat_template_kwargs": {"enable_thinking": false}}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var text strings.Builder
	finals, usage, done := 0, 0, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta        map[string]any `json:"delta"`
				FinishReason *string        `json:"finish_reason"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		if c.Usage != nil {
			usage++
		}
		for _, ch := range c.Choices {
			s, _ := ch.Delta["content"].(string)
			text.WriteString(s)
			if ch.FinishReason != nil {
				finals++
			}
		}
	}
	if finals != 1 || usage != 1 || !done || len(strings.Fields(text.String())) < 40 {
		t.Errorf("finals %d usage %d done %v text %q", finals, usage, done, text.String())
	}
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
