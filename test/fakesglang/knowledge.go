package fakesglang

import (
	"encoding/json"
	"hash/fnv"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var (
	arith   = regexp.MustCompile(`(-?\d+)\s*([*x×+\-])\s*(-?\d+)`)
	unitQ   = regexp.MustCompile(`(?i)how many (\w+) are in (\d+) (\w+)`)
	capital = regexp.MustCompile(`(?i)capital of (?:the )?([A-Z][A-Za-z ]*[a-z])\b`)
	cityIn  = regexp.MustCompile(`\bin ([A-Z][a-zA-Z]+)`)
	needle  = regexp.MustCompile(`the secret number is (\d+)\.`)
)

// units is how many of the first unit make one of the second.
var units = map[[2]string]int{
	{"centimeters", "meters"}: 100, {"meters", "kilometers"}: 1000, {"grams", "kilograms"}: 1000,
	{"milliliters", "liters"}: 1000, {"minutes", "hours"}: 60, {"seconds", "minutes"}: 60,
	{"hours", "days"}: 24, {"days", "weeks"}: 7, {"inches", "feet"}: 12, {"feet", "yards"}: 3,
	{"millimeters", "centimeters"}: 10, {"months", "years"}: 12, {"seconds", "hours"}: 3600,
}

// capitals is what the fake model knows of geography.
var capitals = func() map[string]string {
	const list = "Japan:Tokyo,Italy:Rome,Germany:Berlin,Spain:Madrid,Portugal:Lisbon,Greece:Athens," +
		"Egypt:Cairo,Kenya:Nairobi,Canada:Ottawa,Australia:Canberra,Russia:Moscow,China:Beijing," +
		"Ireland:Dublin,Norway:Oslo,Sweden:Stockholm,Finland:Helsinki,Denmark:Copenhagen,Poland:Warsaw," +
		"Austria:Vienna,Hungary:Budapest,Czech Republic:Prague,Belgium:Brussels,Argentina:Buenos Aires," +
		"Peru:Lima,Chile:Santiago,Colombia:Bogotá,Venezuela:Caracas,Cuba:Havana,Thailand:Bangkok," +
		"Vietnam:Hanoi,Philippines:Manila,South Korea:Seoul,Iran:Tehran,Iraq:Baghdad,Saudi Arabia:Riyadh," +
		"Turkey:Ankara,Ukraine:Kyiv,Romania:Bucharest,Bulgaria:Sofia,Serbia:Belgrade,Croatia:Zagreb," +
		"Iceland:Reykjavik,Morocco:Rabat,Ethiopia:Addis Ababa,Ghana:Accra,Nigeria:Abuja,Afghanistan:Kabul," +
		"Pakistan:Islamabad,Nepal:Kathmandu,United Kingdom:London,France:Paris,Syria:Damascus," +
		"Lebanon:Beirut,Jordan:Amman,Qatar:Doha,Uganda:Kampala,New Zealand:Wellington,Uruguay:Montevideo," +
		"Ecuador:Quito,Estonia:Tallinn,Latvia:Riga,Lithuania:Vilnius,Slovakia:Bratislava,Slovenia:Ljubljana," +
		"Albania:Tirana,Bangladesh:Dhaka,Tunisia:Tunis,Algeria:Algiers,Senegal:Dakar"
	m := map[string]string{}
	for _, pair := range strings.Split(list, ",") {
		country, city, _ := strings.Cut(pair, ":")
		m[strings.ToLower(country)] = city
	}
	return m
}()

// GoodAnswer is what a working model says to prompt: arithmetic and unit conversions are
// computed, capitals are known, a prime or other function request gets Python code, and a
// secret number hidden in a text is found.
func GoodAnswer(prompt string) string {
	if a, ok := trafficAnswer(prompt); ok {
		return a
	}
	lower := strings.ToLower(prompt)
	// A number hidden in a text, asked back: the smoke gate's needle cases.
	if m := needle.FindStringSubmatch(prompt); m != nil && strings.Contains(lower, "what is the secret number") {
		return m[1]
	}
	if m := arith.FindStringSubmatch(prompt); m != nil && strings.Contains(lower, "what is") {
		a, errA := strconv.Atoi(m[1])
		b, errB := strconv.Atoi(m[3])
		if errA == nil && errB == nil {
			switch m[2] {
			case "+":
				return strconv.Itoa(a + b)
			case "-":
				return strconv.Itoa(a - b)
			default:
				return strconv.Itoa(a * b)
			}
		}
	}
	if m := unitQ.FindStringSubmatch(prompt); m != nil {
		n, _ := strconv.Atoi(m[2])
		if f, ok := units[[2]string{strings.ToLower(m[1]), strings.ToLower(m[3])}]; ok {
			return strconv.Itoa(n * f)
		}
	}
	if m := capital.FindStringSubmatch(prompt); m != nil {
		if city, ok := capitals[strings.ToLower(m[1])]; ok {
			return city
		}
	}
	switch {
	case strings.Contains(lower, "prime"):
		return "```python\ndef is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n    return True\n```"
	case strings.Contains(lower, "python") || strings.Contains(lower, "function"):
		return "```python\ndef total(numbers):\n    return sum(numbers)\n```"
	}
	return "I am a small test server; I can add, multiply, convert units, name capitals and write a Python function."
}

// fixedPrompt reports whether prompt is one the gate's own cases ask (the seed's prime
// function, 17 * 23, the capital of France, a sum function, a secret number in a text).
func fixedPrompt(prompt string) bool {
	lower := strings.ToLower(prompt)
	for _, s := range []string{"17 * 23", "capital of france", "prime", "python", "what is the secret number"} {
		if strings.Contains(lower, s) {
			return true
		}
	}
	return false
}

// fluentWrong returns right for the fixed prompts, and for a third of the others (chosen
// by a hash of the prompt) an answer that is close but wrong: a number off by one, a
// capital swapped for a bigger city.
func fluentWrong(prompt, right string) string {
	if fixedPrompt(prompt) {
		return right
	}
	h := fnv.New32a()
	h.Write([]byte(prompt))
	if h.Sum32()%3 != 0 {
		return right
	}
	if n, err := strconv.Atoi(right); err == nil {
		return strconv.Itoa(n + 1)
	}
	return "Geneva"
}

// call is a tool call the fake model decided to make.
type call struct {
	name string
	args map[string]string
	keys []string
}

func (c call) json() string {
	m := map[string]string{}
	for _, k := range c.keys {
		m[k] = c.args[k]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// raw is the call as Qwen3-Coder's chat template writes it, before a tool-call parser
// turns it into tool_calls.
func (c call) raw() string {
	var b strings.Builder
	b.WriteString("<tool_call>\n<function=" + c.name + ">\n")
	for _, k := range c.keys {
		b.WriteString("<parameter=" + k + ">\n" + c.args[k] + "\n</parameter>\n")
	}
	b.WriteString("</function>\n</tool_call>")
	return b.String()
}

// pickToolCall decides whether the model calls a tool: when tools were offered and the
// prompt names one (a word of its name other than "get") or says "use the tool". The
// arguments are filled from the prompt: a city or location is the capitalised word
// after "in".
func pickToolCall(prompt string, tools []RequestTool) (call, bool) {
	if len(tools) == 0 {
		return call{}, false
	}
	lower := strings.ToLower(prompt)
	chosen := -1
	for i, t := range tools {
		for _, w := range strings.FieldsFunc(strings.ToLower(t.Function.Name), func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
			if w != "get" && strings.Contains(lower, w) {
				chosen = i
				break
			}
		}
		if chosen >= 0 {
			break
		}
	}
	if chosen < 0 {
		if !strings.Contains(lower, "use the tool") {
			return call{}, false
		}
		chosen = 0
	}
	t := tools[chosen].Function
	c := call{name: t.Name, args: map[string]string{}}
	props, _ := t.Parameters["properties"].(map[string]any)
	for k := range props {
		c.keys = append(c.keys, k)
	}
	sort.Strings(c.keys)
	for _, k := range c.keys {
		switch strings.ToLower(k) {
		case "city", "location", "place":
			if m := cityIn.FindStringSubmatch(prompt); m != nil {
				c.args[k] = m[1]
			}
		}
	}
	return c, true
}

// Filler returns n bytes of text that reads like language to the gate's detectors:
// made-up words of a few syllables in sentences, from a fixed seed, with no run or
// repeated n-gram beyond what prose has.
func Filler(n int) string {
	syll := []string{"ka", "lo", "mi", "ren", "tu", "sha", "vor", "ne", "dil", "po", "qua", "ter",
		"bis", "gan", "ul", "fe", "zor", "yan", "ri", "cho", "pel", "mas", "tin", "wu", "ek"}
	var b strings.Builder
	b.Grow(n + 64)
	x := uint64(0x9E3779B97F4A7C15)
	next := func(k int) int { // xorshift64*
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		return int(((x * 0x2545F4914F6CDD1D) >> 33) % uint64(k))
	}
	for b.Len() < n {
		words := 5 + next(10)
		for w := range words {
			for range 1 + next(3) {
				b.WriteString(syll[next(len(syll))])
			}
			if w < words-1 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(". ")
	}
	return b.String()[:n]
}
