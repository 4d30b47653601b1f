package gate

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// BuiltinPrefix marks an accuracy question set shipped in the binary ("builtin:arithmetic").
const BuiltinPrefix = "builtin:"

// Question is one question of an accuracy sweep: a prompt and the answers that count as
// right (any one of them, as a whole token of the content).
type Question struct {
	// Prompt is the question as sent to the model.
	Prompt string `json:"prompt"`
	// Answers are the accepted answers; a JSONL line gives "answer" as a string or a list.
	Answers []string `json:"answer"`
}

// UnmarshalJSON reads {"prompt": ..., "answer": "391"} or {"answer": ["Kyiv", "Kiev"]};
// a number as the answer is taken as its text.
func (q *Question) UnmarshalJSON(b []byte) error {
	var raw struct {
		Prompt string          `json:"prompt"`
		Answer json.RawMessage `json:"answer"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	q.Prompt = raw.Prompt
	q.Answers = nil
	a := bytes.TrimSpace(raw.Answer)
	switch {
	case len(a) == 0 || string(a) == "null":
	case a[0] == '"':
		var s string
		if err := json.Unmarshal(a, &s); err != nil {
			return err
		}
		q.Answers = []string{s}
	case a[0] == '[':
		if err := json.Unmarshal(a, &q.Answers); err != nil {
			return fmt.Errorf("answer: want a string or a list of strings: %w", err)
		}
	default:
		var n json.Number
		if err := json.Unmarshal(a, &n); err != nil {
			return fmt.Errorf("answer: want a string, a number or a list of strings")
		}
		q.Answers = []string{n.String()}
	}
	return nil
}

// BuiltinQuestionSets names the question sets shipped in the binary.
func BuiltinQuestionSets() []string {
	names := make([]string, 0, len(builtinSets))
	for n := range builtinSets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var builtinSets = map[string]func(seed uint64) []Question{
	"arithmetic": arithmeticQuestions,
	"units":      unitQuestions,
	"capitals":   capitalQuestions,
}

// BuiltinQuestions returns a shipped question set by its name (without the "builtin:"
// prefix). The sets are generated from fixed seeds or fixed lists: the same questions on
// every run and every build.
func BuiltinQuestions(name string) ([]Question, error) {
	f, ok := builtinSets[name]
	if !ok {
		return nil, fmt.Errorf("no built-in question set %q (built-in sets: %s)", name, strings.Join(BuiltinQuestionSets(), ", "))
	}
	return f(0), nil
}

// BuiltinQuestionsSeeded returns a shipped question set drawn from a run's seed: other
// numbers, other phrasings and another order for another seed (0: BuiltinQuestions' set).
func BuiltinQuestionsSeeded(name string, seed uint64) ([]Question, error) {
	f, ok := builtinSets[name]
	if !ok {
		return nil, fmt.Errorf("no built-in question set %q (built-in sets: %s)", name, strings.Join(BuiltinQuestionSets(), ", "))
	}
	qs := f(seed)
	if seed != 0 {
		// A label of its own on every question: no two runs ask the same text, and a
		// server that knows old prompts by heart has nothing to match.
		r := splitmix64(seed ^ 0x5bd1e995)
		for i := range qs {
			label := r.between(100, 99999)
			for slices.Contains(qs[i].Answers, strconv.Itoa(label)) {
				label++
			}
			qs[i].Prompt = fmt.Sprintf("Question %d: %s", label, qs[i].Prompt)
		}
	}
	return qs, nil
}

// ParseQuestions reads JSONL: one {"prompt": ..., "answer": ...} per line; blank lines and
// lines starting with # are skipped. name is used in errors.
func ParseQuestions(name string, data []byte) ([]Question, error) {
	var out []Question
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var q Question
		if err := json.Unmarshal([]byte(text), &q); err != nil {
			return nil, fmt.Errorf("%s:%d: want {\"prompt\": ..., \"answer\": ...}: %w", name, line, err)
		}
		if strings.TrimSpace(q.Prompt) == "" {
			return nil, fmt.Errorf("%s:%d: prompt is empty", name, line)
		}
		if len(q.Answers) == 0 {
			return nil, fmt.Errorf("%s:%d: answer is missing", name, line)
		}
		for _, a := range q.Answers {
			if strings.TrimSpace(a) == "" {
				return nil, fmt.Errorf("%s:%d: an answer is empty", name, line)
			}
		}
		out = append(out, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no questions", name)
	}
	return out, nil
}

// LoadQuestions returns the questions an accuracy case names: "builtin:NAME" from the
// binary, anything else read through readFile and parsed as JSONL.
func LoadQuestions(spec string, readFile func(string) ([]byte, error)) ([]Question, error) {
	return loadQuestions(spec, readFile, 0)
}

// loadQuestions is LoadQuestions with the built-in sets drawn from seed.
func loadQuestions(spec string, readFile func(string) ([]byte, error), seed uint64) ([]Question, error) {
	if name, ok := strings.CutPrefix(spec, BuiltinPrefix); ok {
		return BuiltinQuestionsSeeded(name, seed)
	}
	if readFile == nil {
		return nil, errors.New("reading questions " + spec + ": no file reader")
	}
	data, err := readFile(spec)
	if err != nil {
		return nil, fmt.Errorf("reading questions %s: %w", spec, err)
	}
	return ParseQuestions(spec, data)
}

// splitmix64 is the question generator's random source: a fixed algorithm, so the
// generated sets never change with the Go version.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// between returns an integer in [lo, hi].
func (s *splitmix64) between(lo, hi int) int {
	return lo + int(s.next()%uint64(hi-lo+1))
}

// arithmeticQuestions are 60 sums, differences and products of small whole numbers, each
// with one right answer that is not one of its operands.
func arithmeticQuestions(seed uint64) []Question {
	r := splitmix64(cmp.Or(seed, 20260301))
	out := make([]Question, 0, 60)
	seen := map[string]bool{}
	for len(out) < 60 {
		var a, b, ans int
		var op string
		switch len(out) % 3 {
		case 0:
			a, b, op = r.between(12, 98), r.between(12, 98), "+"
			ans = a + b
		case 1:
			a, b, op = r.between(60, 199), r.between(11, 59), "-"
			ans = a - b
		default:
			a, b, op = r.between(11, 49), r.between(3, 12), "*"
			ans = a * b
		}
		p := fmt.Sprintf("What is %d %s %d? Answer with the number only.", a, op, b)
		if ans == a || ans == b || seen[p] {
			continue // an echo of the question must not count as the answer
		}
		seen[p] = true
		out = append(out, Question{Prompt: p, Answers: []string{strconv.Itoa(ans)}})
	}
	return out
}

// conversions are exact whole-number unit conversions: how many `small` in one `big`.
var conversions = []struct {
	small, big string
	factor     int
}{
	{"centimeters", "meters", 100},
	{"meters", "kilometers", 1000},
	{"grams", "kilograms", 1000},
	{"milliliters", "liters", 1000},
	{"minutes", "hours", 60},
	{"seconds", "minutes", 60},
	{"hours", "days", 24},
	{"days", "weeks", 7},
	{"inches", "feet", 12},
	{"feet", "yards", 3},
	{"millimeters", "centimeters", 10},
	{"months", "years", 12},
}

// unitQuestions are 60 different conversions between units with an exact whole-number factor.
func unitQuestions(seed uint64) []Question {
	r := splitmix64(cmp.Or(seed, 20260302))
	out := make([]Question, 0, 60)
	seen := map[string]bool{}
	for len(out) < 60 {
		c := conversions[len(out)%len(conversions)]
		n := r.between(2, 19)
		p := fmt.Sprintf("How many %s are in %d %s? Answer with the number only.", c.small, n, c.big)
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, Question{Prompt: p, Answers: []string{strconv.Itoa(n * c.factor)}})
	}
	return out
}

// capitals are countries whose capital has one undisputed name (no seat-of-government
// split, no recent move), with the spellings a model may use.
var capitals = []struct {
	country string
	capital []string
}{
	{"Japan", []string{"Tokyo"}}, {"Italy", []string{"Rome"}}, {"Germany", []string{"Berlin"}},
	{"Spain", []string{"Madrid"}}, {"Portugal", []string{"Lisbon"}}, {"Greece", []string{"Athens"}},
	{"Egypt", []string{"Cairo"}}, {"Kenya", []string{"Nairobi"}}, {"Canada", []string{"Ottawa"}},
	{"Australia", []string{"Canberra"}}, {"Russia", []string{"Moscow"}}, {"China", []string{"Beijing"}},
	{"Ireland", []string{"Dublin"}}, {"Norway", []string{"Oslo"}}, {"Sweden", []string{"Stockholm"}},
	{"Finland", []string{"Helsinki"}}, {"Denmark", []string{"Copenhagen"}}, {"Poland", []string{"Warsaw"}},
	{"Austria", []string{"Vienna"}}, {"Hungary", []string{"Budapest"}}, {"the Czech Republic", []string{"Prague"}},
	{"Belgium", []string{"Brussels"}}, {"Argentina", []string{"Buenos Aires"}}, {"Peru", []string{"Lima"}},
	{"Chile", []string{"Santiago"}}, {"Colombia", []string{"Bogotá", "Bogota"}}, {"Venezuela", []string{"Caracas"}},
	{"Cuba", []string{"Havana"}}, {"Thailand", []string{"Bangkok"}}, {"Vietnam", []string{"Hanoi"}},
	{"the Philippines", []string{"Manila"}}, {"South Korea", []string{"Seoul"}}, {"Iran", []string{"Tehran"}},
	{"Iraq", []string{"Baghdad"}}, {"Saudi Arabia", []string{"Riyadh"}}, {"Turkey", []string{"Ankara"}},
	{"Ukraine", []string{"Kyiv", "Kiev"}}, {"Romania", []string{"Bucharest"}}, {"Bulgaria", []string{"Sofia"}},
	{"Serbia", []string{"Belgrade"}}, {"Croatia", []string{"Zagreb"}}, {"Iceland", []string{"Reykjavik", "Reykjavík"}},
	{"Morocco", []string{"Rabat"}}, {"Ethiopia", []string{"Addis Ababa"}}, {"Ghana", []string{"Accra"}},
	{"Nigeria", []string{"Abuja"}}, {"Afghanistan", []string{"Kabul"}}, {"Pakistan", []string{"Islamabad"}},
	{"Nepal", []string{"Kathmandu"}}, {"the United Kingdom", []string{"London"}}, {"France", []string{"Paris"}},
	{"Syria", []string{"Damascus"}}, {"Lebanon", []string{"Beirut"}}, {"Jordan", []string{"Amman"}},
	{"Qatar", []string{"Doha"}}, {"Uganda", []string{"Kampala"}}, {"New Zealand", []string{"Wellington"}},
	{"Uruguay", []string{"Montevideo"}}, {"Ecuador", []string{"Quito"}}, {"Estonia", []string{"Tallinn"}},
	{"Latvia", []string{"Riga"}}, {"Lithuania", []string{"Vilnius"}}, {"Slovakia", []string{"Bratislava"}},
	{"Slovenia", []string{"Ljubljana"}}, {"Albania", []string{"Tirana"}}, {"Bangladesh", []string{"Dhaka"}},
	{"Tunisia", []string{"Tunis"}}, {"Algeria", []string{"Algiers"}}, {"Senegal", []string{"Dakar"}},
}

// capitalPhrasings are the ways a capital question is asked; seed 0 asks the first.
var capitalPhrasings = []string{
	"What is the capital of %s? Answer with the city name only.",
	"Name the capital city of %s. Reply with the city only.",
	"Which city is the capital of %s? Give just the city.",
	"%s has which city as its capital? Answer with the city name only.",
}

// capitalQuestions asks for the capital of each country in the list; another seed asks
// them in another order and phrasing.
func capitalQuestions(seed uint64) []Question {
	out := make([]Question, 0, len(capitals))
	r := splitmix64(seed)
	for _, c := range capitals {
		phr := capitalPhrasings[0]
		if seed != 0 {
			phr = capitalPhrasings[r.between(0, len(capitalPhrasings)-1)]
		}
		country := c.country
		if strings.HasPrefix(phr, "%s") {
			country = strings.ToUpper(country[:1]) + country[1:]
		}
		out = append(out, Question{
			Prompt:  fmt.Sprintf(phr, country),
			Answers: append([]string(nil), c.capital...),
		})
	}
	if seed != 0 {
		for i := len(out) - 1; i > 0; i-- {
			j := r.between(0, i)
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// digitGroup matches a thousands separator between digits ("7,000", "7 000").
var digitGroup = regexp.MustCompile(`(\d)[,\x{202F}\x{00A0}](\d{3})`)

// HasAnswer reports whether one of answers appears in content as a whole token: not
// inside a longer word or number, case-insensitively, with thousands separators in
// numbers ignored ("7,000" counts for 7000).
func HasAnswer(content string, answers []string) bool {
	norm := content
	for {
		next := digitGroup.ReplaceAllString(norm, "$1$2")
		if next == norm {
			break
		}
		norm = next
	}
	for _, a := range answers {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		re, err := regexp.Compile(`(?i)(?:^|[^\p{L}\p{N}])` + regexp.QuoteMeta(a) + `(?:$|[^\p{L}\p{N}])`)
		if err != nil {
			continue
		}
		if re.MatchString(norm) {
			return true
		}
	}
	return false
}
