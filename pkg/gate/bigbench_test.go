package gate

import (
	"context"
	"encoding/json"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fluentText returns about n bytes of text that reads like language to the detectors:
// made-up words of random syllables, sentences, no long repeats. It starts with answer.
func fluentText(n int, answer string, seed int64) string {
	syll := []string{"ka", "lo", "mi", "ren", "tu", "sha", "vor", "ne", "dil", "po", "qua", "ter",
		"bis", "gan", "ul", "fe", "zor", "yan", "ri", "cho", "pel", "mas", "tin", "wu", "ek"}
	r := rand.New(rand.NewSource(seed))
	var b strings.Builder
	b.Grow(n + 64)
	b.WriteString("The answer is " + answer + ". ")
	for b.Len() < n {
		words := 5 + r.Intn(10)
		for w := range words {
			for range 1 + r.Intn(3) {
				b.WriteString(syll[r.Intn(len(syll))])
			}
			if w < words-1 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(". ")
	}
	return b.String()
}

// bigAnswers serves a valid chat answer whose content is size bytes of fluent text with
// the right number in it.
func bigAnswers(tb testing.TB, size int) *httptest.Server {
	tb.Helper()
	content := fluentText(size, "391", 1)
	body, err := json.Marshal(map[string]any{
		"id": "x", "object": "chat.completion", "model": "m",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "matched_stop": 151645,
			"message": map[string]any{"role": "assistant", "content": content, "reasoning_content": nil, "tool_calls": nil}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health_generate":
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		default:
			http.NotFound(w, r)
		}
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// peakHeap samples the live heap until stop is called and returns the most it saw.
func peakHeap() (stop func() uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

// BenchmarkLoad64Answers7MiB gates a load case of 64 requests whose answers are valid and
// 7 MiB each, and reports the peak live heap of the run besides -benchmem's figures.
func BenchmarkLoad64Answers7MiB(b *testing.B) {
	srv := bigAnswers(b, 7<<20)
	cfg := Config{URL: srv.URL, Model: "m", ReadyTimeout: 10 * time.Second, RequestTimeout: 5 * time.Minute,
		Cases: []Case{{Name: "load", Prompt: "What is 17 * 23?", Concurrency: 64, Expect: Expect{Regex: `\b391\b`}}}}
	var peak uint64
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		stop := peakHeap()
		res, err := Run(context.Background(), cfg)
		peak = max(peak, stop())
		if err != nil {
			b.Fatal(err)
		}
		if !res.Pass {
			b.Fatalf("gate failed: %s", res.Summary())
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
