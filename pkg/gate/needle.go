package gate

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Limits and thresholds of a needle case.
const (
	// MaxNeedleWords is the longest text a needle case may hide its number in.
	MaxNeedleWords = 200000
	// LongContextWords is the length (in words of the generated text) from which a needle
	// case is a long-context case: past one prefill chunk of stock SGLang on most GPUs
	// (chunked_prefill_size 2048 to 8192; 16384 on the largest), a word of the generated
	// text being about one token.
	LongContextWords = 4096
	// BuiltinLongWords is the length of the long prompts of the built-in long-context
	// case: past the largest prefill chunk stock SGLang picks (16384 tokens).
	BuiltinLongWords = 20000
)

// Needle makes a case generate its prompts instead of sending one: each request hides a
// number of its own in made-up text of a given length and asks for it back, and the
// answer must hold that number. The case sends max(concurrency, len(words)) requests at
// once, request i hiding its number in words[i % len(words)] words (0: the number alone),
// so that prompts of differing lengths and content run in one batch: SGLang's NaN report
// (sglang#20047) needed such mixed batches, and a kernel path taken only past one prefill
// chunk (chunked prefill, a filling KV cache, the linear-attention state of a hybrid
// model) answers garbage to long prompts only.
type Needle struct {
	// Words are the lengths of the text around each request's number, in words (about a
	// token each in the tokenizers of the models served here).
	Words []int `yaml:"words" json:"words"`
}

// Longest returns the longest generated text, in words.
func (n Needle) Longest() int {
	m := 0
	for _, w := range n.Words {
		m = max(m, w)
	}
	return m
}

func (n Needle) validate(c Case) error {
	if strings.TrimSpace(c.Prompt) != "" || len(c.Tools) > 0 || c.Expect.Regex != "" ||
		len(c.Expect.Contains) > 0 || len(c.Expect.ContainsAny) > 0 || c.Expect.ToolCall != nil || c.Expect.Reasoning {
		return errors.New("a needle case takes no prompt, tools or expect: it generates its prompts and checks each answer for its own number")
	}
	if len(n.Words) == 0 {
		return errors.New("needle.words is empty: want the lengths of the generated texts, e.g. [20000, 0, 300]")
	}
	if len(n.Words) > MaxConcurrency {
		return fmt.Errorf("needle.words has %d lengths: want at most %d", len(n.Words), MaxConcurrency)
	}
	for i, w := range n.Words {
		if w < 0 || w > MaxNeedleWords {
			return fmt.Errorf("needle.words[%d] %d: want 0 to %d", i, w, MaxNeedleWords)
		}
	}
	return nil
}

// requests returns how many requests a needle case sends.
func (n Needle) requests(c Case) int {
	return max(c.Concurrency, len(n.Words), 1)
}

// NeedlePrompt returns request i's prompt of a needle case whose text is words long, and
// the number its answer must hold. The text is made-up sentences of common words (no
// digits), different for every i and length, with the number's sentence somewhere inside.
func NeedlePrompt(i, words int) (prompt, number string) {
	return NeedlePromptSeeded(0, i, words)
}

// NeedlePromptSeeded is NeedlePrompt drawn from a run's seed: another seed, another text
// and number for the same request.
func NeedlePromptSeeded(seed uint64, i, words int) (prompt, number string) {
	r := rng(uint64(i)*0x9E3779B97F4A7C15 + uint64(words)*0xBF58476D1CE4E5B9 + 1 + seed*0xD6E8FEB86659FD93)
	number = strconv.Itoa(10000 + int(r.next()%90000))
	needle := "Remember this: the secret number is " + number + "."
	question := "What is the secret number given in the text above? Answer with the number only."
	if words <= 0 {
		return needle + "\n\n" + question, number
	}
	var b strings.Builder
	b.Grow(words * 7)
	// Somewhere between a tenth and nine tenths of the way through.
	at := words * int(10+r.next()%81) / 100
	placed := false
	n := 0
	for n < words {
		if !placed && n >= at {
			b.WriteString(needle)
			b.WriteByte(' ')
			placed = true
		}
		s := sentence(&r)
		b.WriteString(s)
		n += strings.Count(s, " ") + 1
		if r.next()%6 == 0 {
			b.WriteString("\n\n")
		} else {
			b.WriteByte(' ')
		}
	}
	if !placed {
		b.WriteString(needle)
	}
	return strings.TrimSpace(b.String()) + "\n\n" + question, number
}

// NeedleWords counts the words of a text as the needle case's lengths count them.
func NeedleWords(s string) int { return len(strings.Fields(s)) }

// needleRequest builds request i of a needle case.
func needleRequest(cfg Config, model string, k Case, i int) request {
	words := k.Needle.Words[i%len(k.Needle.Words)]
	prompt, number := NeedlePromptSeeded(cfg.Seed, i, words)
	exp := Expect{Regex: `\b` + regexp.QuoteMeta(number) + `\b`}
	msgs := []Message{{Role: "user", Content: prompt}}
	if i%2 == 1 {
		// Every other request samples (its own seed), so that greedy and sampled requests
		// of mixed lengths share the batch, as real traffic does: the number holds for
		// any sample.
		s := k
		t, p := needleTemperature, needleTopP
		s.Temperature, s.TopP = &t, &p
		return buildRequest(cfg, model, s, msgs, exp, sampleSeed(cfg.Seed, k.Name, i), nil)
	}
	return buildRequest(cfg, model, k, msgs, exp, 0, nil)
}

// The sampling parameters of a needle case's sampled requests.
const (
	needleTemperature = 0.6
	needleTopP        = 0.95
)

// The words of the generated text: common English words, no digits, and none of the
// words the gate's other prompts are recognised by.
var (
	adjectives = strings.Fields("quiet old small bright green heavy narrow warm distant gentle " +
		"broad silver wooden pale busy calm dusty hidden tall round")
	nouns = strings.Fields("river garden lantern village bridge meadow harbor window forest " +
		"market orchard mill tower valley road cottage basket field kettle path")
	verbs = strings.Fields("rests beside leans toward waits near stands behind drifts past " +
		"looks over hides under sits across glows above turns around")
	subjects = strings.Fields("The A Every That One")
)

// sentence is one made-up sentence: "The quiet river rests beside the green mill."
func sentence(r *rng) string {
	pick := func(list []string) string { return list[r.next()%uint64(len(list))] }
	v := pick(verbs)
	return pick(subjects) + " " + pick(adjectives) + " " + pick(nouns) + " " + v + " the " +
		pick(adjectives) + " " + pick(nouns) + "."
}

// rng is splitmix64: the same text for the same request every run.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9E3779B97F4A7C15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// BuiltinLoadCase is the built-in load case: 64 requests at once whose prompts differ in
// length (the number alone up to 2,000 words) and content, every answer checked.
func BuiltinLoadCase() Case {
	return Case{Name: "load", Concurrency: 64, Needle: &Needle{Words: []int{0, 60, 400, 2000}}}
}

// BuiltinLongCase is the built-in long-context case: three prompts of BuiltinLongWords
// words (past one prefill chunk) sent together with nine short ones, every answer checked.
func BuiltinLongCase() Case {
	return Case{Name: "long-context", Concurrency: 12,
		Needle: &Needle{Words: []int{BuiltinLongWords, 0, 50, 300}}}
}
