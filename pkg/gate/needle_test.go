package gate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// TestNeedlePrompt: every request's text is its own (length, content and number), as long
// as asked, holds its number once, and has no other digits.
func TestNeedlePrompt(t *testing.T) {
	seen := map[string]bool{}
	numbers := map[string]bool{}
	for i := range 8 {
		for _, w := range []int{0, 60, 2000, BuiltinLongWords} {
			p, n := NeedlePrompt(i, w)
			if seen[p] {
				t.Fatalf("request %d, %d words: prompt repeated", i, w)
			}
			seen[p] = true
			numbers[n] = true
			if got := NeedleWords(p); got < w || got > w+40 {
				t.Errorf("request %d: %d words, want about %d", i, got, w)
			}
			if strings.Count(p, n) != 1 || strings.Count(p, "secret number is") != 1 {
				t.Errorf("request %d, %d words: number %s not there once", i, w, n)
			}
			if digits := strings.IndexFunc(strings.Replace(p, n, "", 1), func(r rune) bool { return r >= '0' && r <= '9' }); digits >= 0 {
				t.Errorf("request %d: a digit besides the number at %d", i, digits)
			}
			if again, _ := NeedlePrompt(i, w); again != p {
				t.Errorf("request %d: not the same prompt twice", i)
			}
		}
	}
	if len(numbers) < 30 {
		t.Errorf("only %d distinct numbers of 32", len(numbers))
	}
}

// TestLongContextCase: the built-in long-context case sends long prompts past one prefill
// chunk together with short ones, and checks each answer's number. A server that answers
// garbage only to long prompts passes every other built-in case and fails this one, naming
// it; one that answers garbage only to batches of mixed lengths fails it and the load
// case, and passes the rest (the old load case, one prompt replayed, passed it). The good
// server passes all.
func TestLongContextCase(t *testing.T) {
	long := caseNamed(t, "long-context")
	if long.Kind() != KindLong || long.Needle.Longest() < 16384 {
		t.Fatalf("built-in long case: %+v", long)
	}
	t.Run("good", func(t *testing.T) {
		h, _, cfg := fakeServer(t, fakesglang.Options{Latency: 300 * time.Millisecond})
		c := runOne(t, cfg, long)
		if !c.Pass || c.Answers != 12 || c.Kind != KindLong {
			t.Fatalf("%+v", c)
		}
		if h.Peak() < 12 {
			t.Errorf("peak %d: the long and short prompts must be in flight together", h.Peak())
		}
	})
	run := func(t *testing.T, mode fakesglang.Mode) *Result {
		_, _, cfg := fakeServer(t, fakesglang.Options{Mode: mode})
		cfg.Cases = BuiltinSet()
		for i := range cfg.Cases {
			if a := cfg.Cases[i].Accuracy; a != nil {
				a.Limit = 30
			}
		}
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	verdicts := func(res *Result) map[string]CaseResult {
		m := map[string]CaseResult{}
		for _, c := range res.Cases {
			m[c.Name] = c
		}
		return m
	}
	t.Run("garbage past one chunk", func(t *testing.T) {
		res := run(t, fakesglang.ModeLongContext)
		v := verdicts(res)
		for name, c := range v {
			if c.Pass == (name == "long-context") {
				t.Errorf("case %s: pass %v: %s", name, c.Pass, c.Reason)
			}
		}
		c := v["long-context"]
		if c.Failed != 3 || !strings.Contains(c.Reason, "3 of 12 answers failed; first: degenerate reasoning_content") ||
			!strings.Contains(res.Summary(), "long-context") {
			t.Errorf("%+v\n%s", c, res.Summary())
		}
	})
	t.Run("garbage in mixed batches", func(t *testing.T) {
		res := run(t, fakesglang.ModeMixedBatch)
		v := verdicts(res)
		for name, c := range v {
			if c.Pass == (name == "long-context" || name == "load") {
				t.Errorf("case %s: pass %v: %s", name, c.Pass, c.Reason)
			}
		}
		if c := v["load"]; !strings.Contains(c.Reason, "of 64 answers failed; first: degenerate content (punct-run)") {
			t.Errorf("load: %+v", c)
		}
		// The load case of before, one prompt replayed, does not see it.
		_, _, cfg := fakeServer(t, fakesglang.Options{Mode: fakesglang.ModeMixedBatch})
		if c := runOne(t, cfg, Case{Name: "replayed", Prompt: "What is 17 * 23? Answer with the number only.",
			Concurrency: 64, Expect: Expect{Regex: `\b391\b`}}); !c.Pass {
			t.Errorf("one prompt replayed: %+v", c)
		}
	})
}

// TestValidateNeedle: a needle case takes no prompt or expect and needs lengths in range.
func TestValidateNeedle(t *testing.T) {
	for _, tc := range []struct {
		k    Case
		want string
	}{
		{Case{Name: "a", Needle: &Needle{}}, "needle.words is empty"},
		{Case{Name: "a", Prompt: "hi", Needle: &Needle{Words: []int{1}}}, "takes no prompt"},
		{Case{Name: "a", Needle: &Needle{Words: []int{-1}}}, "needle.words[0] -1: want 0 to 200000"},
		{Case{Name: "a", Needle: &Needle{Words: []int{1}}, Accuracy: &Accuracy{Questions: "builtin:arithmetic"}}, "not both"},
	} {
		err := Config{URL: "http://h:1", Cases: []Case{tc.k}}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.k, err, tc.want)
		}
	}
	if err := (Config{URL: "http://h:1", Cases: []Case{BuiltinLongCase(), BuiltinLoadCase()}}).Validate(); err != nil {
		t.Error(err)
	}
	if k := BuiltinLoadCase().Kind(); k != KindLoad {
		t.Errorf("load case kind %q", k)
	}
}
