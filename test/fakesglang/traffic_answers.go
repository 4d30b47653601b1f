package fakesglang

import (
	"encoding/json"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
)

var (
	ordinalNeedle = regexp.MustCompile(`the (first|second) secret number is (\d+)\.`)
	ordinalAsk    = regexp.MustCompile(`(?i)what is the (first|second) secret number`)
	listAsk       = regexp.MustCompile(`list of numbers: ([\d, ]+)\. What is the (largest|smallest) number`)
	cjkTimes      = regexp.MustCompile(`(\d+)\s*乘以\s*(\d+)`)
	cjkCapital    = regexp.MustCompile(`(\p{Han}+)的首都`)
	storyAsk      = regexp.MustCompile(`(?i)write a story of about (\d+) words`)
	capitalAlt    = regexp.MustCompile(`(?i)capital city of (?:the )?([A-Z][A-Za-z ]*[a-z])\b|(?:[Tt]he )?([A-Z][A-Za-z ]*[a-z]) has which city as its capital`)
)

// cjkCapitals is what the fake model knows of geography in Chinese.
var cjkCapitals = map[string]string{"日本": "东京", "法国": "巴黎", "德国": "柏林", "意大利": "罗马", "英国": "伦敦",
	"俄罗斯": "莫斯科", "埃及": "开罗", "西班牙": "马德里", "韩国": "首尔", "泰国": "曼谷", "希腊": "雅典",
	"奥地利": "维也纳", "挪威": "奥斯陆", "葡萄牙": "里斯本", "芬兰": "赫尔辛基"}

// trafficAnswer knows what the other questions of the gate's generated cases ask: two
// numbers in one text, a list's largest or smallest, questions in Chinese, a story, a
// capital asked in other words.
func trafficAnswer(prompt string) (string, bool) {
	if q := ordinalAsk.FindStringSubmatch(prompt); q != nil {
		for _, m := range ordinalNeedle.FindAllStringSubmatch(prompt, -1) {
			if strings.EqualFold(m[1], q[1]) {
				return m[2], true
			}
		}
	}
	if m := listAsk.FindStringSubmatch(prompt); m != nil {
		best := 0
		for i, f := range strings.Split(m[1], ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				continue
			}
			if i == 0 || (m[2] == "largest" && n > best) || (m[2] == "smallest" && n < best) {
				best = n
			}
		}
		return strconv.Itoa(best), true
	}
	if m := cjkTimes.FindStringSubmatch(prompt); m != nil {
		a, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[2])
		return strconv.Itoa(a * b), true
	}
	if m := cjkCapital.FindStringSubmatch(prompt); m != nil {
		if c, ok := cjkCapitals[m[1]]; ok {
			return c, true
		}
	}
	if m := storyAsk.FindStringSubmatch(prompt); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Story(prompt, min(n, 4000)), true
	}
	if m := capitalAlt.FindStringSubmatch(prompt); m != nil {
		country := m[1] + m[2]
		if city, ok := capitals[strings.ToLower(country)]; ok {
			return city, true
		}
	}
	return "", false
}

// Story returns a story of about n words that reads as language to the gate's detectors:
// sentences of common words drawn from a hash of the prompt, nothing repeated.
func Story(prompt string, n int) string {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	x := h.Sum64() | 1
	next := func(k int) int {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		return int(((x * 0x2545F4914F6CDD1D) >> 33) % uint64(k))
	}
	subjects := []string{"The old keeper", "A young miller", "Her brother", "The tired fox", "A quiet girl", "The baker",
		"An old sailor", "The small dog", "Their neighbour", "The night guard", "My grandmother", "The stranger"}
	verbs := []string{"walked toward", "looked at", "remembered", "carried", "found", "painted", "followed", "waited by",
		"listened to", "cleaned", "opened", "closed", "climbed", "repaired", "forgot", "counted"}
	things := []string{"the river", "a broken lantern", "the harbour wall", "an empty basket", "the long road", "the orchard gate",
		"a letter from home", "the bell tower", "the frozen pond", "a wooden boat", "the kitchen window", "the market square",
		"a pair of boots", "the narrow bridge", "the last train", "a jar of honey"}
	tails := []string{"before the rain came", "while the town slept", "without a word", "as the sun went down", "for the third time",
		"with great care", "and smiled", "in the cold morning", "because nobody else would", "after supper", "once more", "at dawn"}
	openers := []string{"", "Later, ", "Then ", "Meanwhile ", "That evening ", "Soon ", "Once again ", "Still, ",
		"By noon ", "Quietly ", "In the end ", "Next "}
	var b strings.Builder
	words := 0
	for words < n {
		subject := subjects[next(len(subjects))]
		if o := openers[next(len(openers))]; o != "" {
			subject = o + strings.ToLower(subject[:1]) + subject[1:]
		}
		s := subject + " " + verbs[next(len(verbs))] + " " + things[next(len(things))] + " " + tails[next(len(tails))] + ". "
		if next(5) == 0 {
			s += "\n\n"
		}
		b.WriteString(s)
		words += len(strings.Fields(s))
	}
	return strings.TrimSpace(b.String())
}

// loopText is what ModeWordLoop writes: the answer's first after words, then one
// sentence over and over up to n words.
func loopText(good string, after, n int) string {
	words := strings.Fields(good)
	if len(words) > after {
		words = words[:after]
	}
	out := strings.Join(words, " ")
	for len(words) < n {
		out += " And then the keeper walked back to the river again."
		words = append(words, make([]string, 10)...)
	}
	return out
}

// memorized reports whether ModeMemorizer knows the prompt by heart.
func (s *Server) memorized(context string) bool {
	return s.opts.Memorized[context]
}

// unseenFact reports whether prompt asks a fact other than the capital of France.
func unseenFact(prompt string) bool {
	lower := strings.ToLower(prompt)
	if strings.Contains(lower, "france") || strings.Contains(prompt, "法国") {
		return false
	}
	return capital.MatchString(prompt) || capitalAlt.MatchString(prompt) || unitQ.MatchString(prompt) || cjkCapital.MatchString(prompt)
}

// wrongly returns a fluent wrong answer in right's place: a number off by one, another city.
func wrongly(right string) string {
	if n, err := strconv.Atoi(right); err == nil {
		return strconv.Itoa(n + 1)
	}
	if hasCJK(right) {
		return "日内瓦"
	}
	return "Geneva"
}

// jsonAnswer is what a grammar-constrained answer to prompt is: a capital question as
// {"country", "capital"}, anything else as {"answer"}.
func jsonAnswer(prompt, content string) string {
	var v map[string]any
	if m := capital.FindStringSubmatch(prompt); m != nil {
		v = map[string]any{"country": m[1], "capital": content}
	} else {
		v = map[string]any{"answer": content}
	}
	b, _ := json.Marshal(v)
	return string(b)
}
