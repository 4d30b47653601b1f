package gate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestDecodeAnswerMatchesEncodingJSON: strings decoded in pieces come out as
// encoding/json decodes them: escapes, surrogate pairs, lone surrogates, invalid UTF-8.
func TestDecodeAnswerMatchesEncodingJSON(t *testing.T) {
	for _, raw := range []string{
		`"plain"`, `""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u4e16"`, `"\ud83d\ude00 smile"`,
		`"lone \ud800 high"`, `"lone \udc00 low"`, `"\ud800\u0041"`, `"\ud800\ud800"`,
		"\"bad \xff byte\"", `"é世😀"`, `"` + strings.Repeat(`x\n`, 40000) + `"`,
	} {
		body := `{"choices":[{"message":{"content":` + raw + `},"finish_reason":"stop"}]}`
		var want struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got, err := decodeAnswer(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%.40s: %v", raw, err)
		}
		if got.content.head != want.Choices[0].Message.Content || got.content.tail != "" || got.finish != "stop" || got.choices != 1 {
			t.Errorf("%.40s: got %q (tail %q), want %q", raw, got.content.head, got.content.tail, want.Choices[0].Message.Content)
		}
	}
}

// TestDecodeAnswerRefuses: what is not one JSON object fails with the answer's start, and
// an answer past MaxAnswerBytes fails saying so.
func TestDecodeAnswerRefuses(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{`<html>oops</html>`, `answer is not JSON: "<html>oops</html>"`},
		{`{"choices":[{"message":{"content":"cut`, `answer is not JSON: "{\"choices\"`},
		{`{"choices":[]} trailing`, "answer is not JSON"},
		{`{"choices":[{"message":{"content":"a` + "\x01" + `"}}]}`, "answer is not JSON"},
		{`{"choices":[{"matched_stop":tru}]}`, "answer is not JSON"},
		{`{"choices":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "answer is not JSON"},
		{``, "answer is not JSON"},
	} {
		_, err := decodeAnswer(strings.NewReader(tt.body))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.40q: err %v, want %q", tt.body, err, tt.want)
		}
	}
	big := `{"choices":[{"message":{"content":"` + strings.Repeat("a", MaxAnswerBytes) + `"}}]}`
	_, err := decodeAnswer(strings.NewReader(big))
	if err == nil || err.Error() != "answer is larger than 8 MiB, the most the gate reads" {
		t.Errorf("big answer: %v", err)
	}
}

// serveContent answers every chat request with content (a valid answer of any size).
func serveContent(t *testing.T, content string) Config {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"finish_reason": "stop",
		"message": map[string]any{"role": "assistant", "content": content}}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			_, _ = w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	cfg := fastConfig(srv.URL)
	cfg.Model, cfg.RequestTimeout = "m", time.Minute
	return cfg
}

// TestLongAnswerJudgedAtBothEnds: of an answer longer than what the gate keeps, the head
// and the tail are judged: degenerate text at the end fails it, the expected number at
// the end passes it, and the sample shows the start.
func TestLongAnswerJudgedAtBothEnds(t *testing.T) {
	fluent := fluentText(KeepHeadBytes+KeepTailBytes+(1<<20), "391", 2)
	k := Case{Name: "long", Prompt: "q", Expect: Expect{Regex: `\b391\b`}}
	if c := runOne(t, serveContent(t, fluent), k); !c.Pass || !strings.HasPrefix(c.Sample, `"The answer is 391.`) {
		t.Errorf("fluent long answer: %+v", c)
	}
	bang := fluent + strings.Repeat("!", 400)
	if c := runOne(t, serveContent(t, bang), k); c.Pass || !strings.Contains(c.Reason, "degenerate content (punct-run): '!' repeated 400 times") {
		t.Errorf("degenerate end: %+v", c)
	}
	late := strings.Replace(fluent, "391", "three hundred", 1) + " So it is 391."
	if c := runOne(t, serveContent(t, late), k); !c.Pass {
		t.Errorf("answer at the end: %+v", c)
	}
	middle := strings.Replace(fluent, "391", "three hundred", 1)
	middle = middle[:len(middle)/2] + " 391 " + middle[len(middle)/2:]
	if c := runOne(t, serveContent(t, middle), k); c.Pass || !strings.Contains(c.Reason, `content does not match regex \b391\b`) {
		t.Errorf("answer only in the dropped middle: %+v", c)
	}
}

// TestBigAnswersBoundedMemory: a load case of 16 valid answers of 7 MiB each passes, and
// the gate's live heap stays far below the answers' size (it was above 1 GiB when every
// answer was read whole, decoded whole and turned into runes).
func TestBigAnswersBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 112 MiB of answers")
	}
	srv := bigAnswers(t, 7<<20)
	cfg := fastConfig(srv.URL)
	cfg.Model, cfg.RequestTimeout = "m", 2*time.Minute
	runtime.GC()
	stop := peakHeap()
	c := runOne(t, cfg, Case{Name: "load", Prompt: "q", Concurrency: 16, Expect: Expect{Regex: `\b391\b`}})
	peak := stop()
	if !c.Pass || c.Answers != 16 {
		t.Fatalf("%+v", c)
	}
	// The server holds one 7 MiB body; the gate's share must stay within a few MiB per
	// answer in flight.
	if limit := uint64(64 << 20); peak > limit {
		t.Errorf("peak live heap %d MiB, want at most %d MiB", peak>>20, limit>>20)
	}
	t.Logf("peak live heap %.1f MiB", float64(peak)/(1<<20))
}

// TestToolCallsBounded: calls past MaxToolCalls are counted, not kept, and arguments
// past MaxArgumentsBytes fail the case with their size.
func TestToolCallsBounded(t *testing.T) {
	var calls []string
	for i := range MaxToolCalls + 5 {
		calls = append(calls, fmt.Sprintf(`{"type":"function","function":{"name":"f%d","arguments":"{}"}}`, i))
	}
	resp, err := decodeAnswer(strings.NewReader(`{"choices":[{"message":{"tool_calls":[` + strings.Join(calls, ",") + `]}}]}`))
	if err != nil || len(resp.calls) != MaxToolCalls || resp.callErr != "" {
		t.Errorf("calls kept %d, err %v %q", len(resp.calls), err, resp.callErr)
	}
	args, _ := json.Marshal(`{"city":"` + strings.Repeat("Paris ", MaxArgumentsBytes/6+1) + `"}`)
	resp, err = decodeAnswer(strings.NewReader(`{"choices":[{"message":{"tool_calls":[{"function":{"name":"get_weather","arguments":` + string(args) + `}}]}}]}`))
	if err != nil || !strings.Contains(resp.callErr, "tool call get_weather: function.arguments is 131") ||
		!strings.Contains(resp.callErr, "more than the 128 KiB the gate parses") {
		t.Errorf("err %v, callErr %q", err, resp.callErr)
	}
}

// TestKeeperCutsAtRunes: a rune split between head and tail comes back whole when nothing
// was dropped, and cut runes at the edges of the kept windows are dropped, not garbled.
func TestKeeperCutsAtRunes(t *testing.T) {
	k := &keeper{headMax: 4, tailMax: 4}
	for _, b := range []byte("ab世cd") {
		k.write([]byte{b})
	}
	if got := k.text(); got.head != "ab世cd" || got.tail != "" || got.cut() {
		t.Errorf("whole: %+v", got)
	}
	k = &keeper{headMax: 4, tailMax: 3}
	k.write([]byte("ab世" + strings.Repeat("x", 10) + "世d"))
	if got := k.text(); got.head != "ab" || got.tail != "d" || !got.cut() {
		t.Errorf("cut: %+v", got)
	}
}
