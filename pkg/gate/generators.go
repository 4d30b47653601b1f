package gate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// generated is one drawn question: the messages (or raw prompt) and what the answer
// must hold.
type generated struct {
	messages []Message
	expect   Expect
	// schema is the response_format a json case asks with.
	schema map[string]any
	// second is the question of a prefix-cache pair's second request.
	second *generated
}

// generate draws request i of a generated case.
func generate(kind string, seed uint64) generated {
	r := splitmix64(seed)
	if draw, ok := generators[kind]; ok {
		return draw(&r, seed)
	}
	return userQuestion("What is 17 * 23? Answer with the number only.", number(391))
}

// generators draw a question of each generator from r, and seed where the question
// is built from more than r.
var generators = map[string]func(r *splitmix64, seed uint64) generated{
	GenArithmetic: genArithmetic,
	GenCapital:    genCapital,
	GenUnit:       genUnit,
	GenList:       genList,
	GenNeedle:     genNeedle,
	GenMultiTurn:  genMultiTurn,
	GenPrefix:     genPrefix,
	GenCJK:        genCJK,
	GenStory:      genStory,
	GenJSON:       genJSON,
}

// userQuestion is a question of one user message p whose answer must meet exp.
func userQuestion(p string, exp Expect) generated {
	return generated{messages: []Message{{Role: "user", Content: p}}, expect: exp}
}

// number expects the number n as a word of its own.
func number(n int) Expect { return Expect{Regex: `\b` + strconv.Itoa(n) + `\b`} }

func genArithmetic(r *splitmix64, _ uint64) generated {
	for {
		a, b := r.between(12, 999), r.between(3, 99)
		switch r.between(0, 2) {
		case 0:
			return userQuestion(fmt.Sprintf("What is %d + %d? Answer with the number only.", a, b), number(a+b))
		case 1:
			if a-b > 0 && a-b != b {
				return userQuestion(fmt.Sprintf("What is %d - %d? Answer with the number only.", a, b), number(a-b))
			}
		default:
			return userQuestion(fmt.Sprintf("What is %d * %d? Answer with the number only.", a, b), number(a*b))
		}
	}
}

func genCapital(r *splitmix64, _ uint64) generated {
	c := capitals[r.between(0, len(capitals)-1)]
	phr := []string{"What is the capital of %s? Answer with the city name only.",
		"Name the capital city of %s. Reply with the city only.",
		"Which city is the capital of %s? One word or name, nothing else."}
	return userQuestion(label(r)+fmt.Sprintf(phr[r.between(0, len(phr)-1)], c.country), Expect{ContainsAny: c.capital})
}

func genUnit(r *splitmix64, _ uint64) generated {
	c := conversions[r.between(0, len(conversions)-1)]
	n := r.between(2, 49)
	return userQuestion(fmt.Sprintf("How many %s are in %d %s? Answer with the number only.", c.small, n, c.big), number(n*c.factor))
}

func genList(r *splitmix64, _ uint64) generated {
	k := r.between(5, 9)
	nums := make([]int, 0, k)
	seen := map[int]bool{}
	for len(nums) < k {
		v := r.between(10, 999)
		if !seen[v] {
			seen[v] = true
			nums = append(nums, v)
		}
	}
	parts := make([]string, len(nums))
	for i, v := range nums {
		parts[i] = strconv.Itoa(v)
	}
	if r.between(0, 1) == 0 {
		return userQuestion(fmt.Sprintf("Here is a list of numbers: %s. What is the largest number in the list? Answer with the number only.",
			strings.Join(parts, ", ")), number(slices.Max(nums)))
	}
	return userQuestion(fmt.Sprintf("Here is a list of numbers: %s. What is the smallest number in the list? Answer with the number only.",
		strings.Join(parts, ", ")), number(slices.Min(nums)))
}

func genNeedle(r *splitmix64, seed uint64) generated {
	p, n := NeedlePromptSeeded(seed, 0, r.between(200, 600))
	return userQuestion(p, Expect{Regex: `\b` + n + `\b`})
}

func genMultiTurn(r *splitmix64, _ uint64) generated {
	n := strconv.Itoa(10000 + r.between(0, 89999))
	return generated{messages: []Message{
		{Role: "system", Content: "You are a careful assistant. Answer briefly."},
		{Role: "user", Content: "Remember this: the secret number is " + n + ". Say OK."},
		{Role: "assistant", Content: "OK."},
		{Role: "user", Content: "What is the secret number I told you? Answer with the number only."},
	}, expect: Expect{Regex: `\b` + n + `\b`}}
}

func genPrefix(r *splitmix64, seed uint64) generated {
	a := strconv.Itoa(10000 + r.between(0, 89999))
	b := strconv.Itoa(10000 + r.between(0, 89999))
	for b == a {
		b = strconv.Itoa(10000 + r.between(0, 89999))
	}
	pre := prefixPreamble(seed, a, b)
	ask := func(which, want string) *generated {
		return &generated{messages: []Message{{Role: "system", Content: pre},
			{Role: "user", Content: "What is the " + which + " secret number given in the text above? Answer with the number only."}},
			expect: Expect{Regex: `\b` + want + `\b`}}
	}
	g := *ask("first", a)
	g.second = ask("second", b)
	return g
}

func genCJK(r *splitmix64, _ uint64) generated {
	if r.between(0, 1) == 0 {
		a, b := r.between(11, 99), r.between(3, 29)
		return userQuestion(fmt.Sprintf("%d 乘以 %d 等于多少？只回答数字。", a, b), number(a*b))
	}
	c := cjkCapitals[r.between(0, len(cjkCapitals)-1)]
	return userQuestion(fmt.Sprintf("第%d题：%s的首都是哪个城市？只回答城市名。", r.between(100, 99999), c[0]), Expect{Contains: []string{c[1]}})
}

func genStory(r *splitmix64, _ uint64) generated {
	p := fmt.Sprintf("Write a story of about 500 words about a %s %s and a %s %s. Use plain prose, no lists, no headings.",
		adjectives[r.between(0, len(adjectives)-1)], nouns[r.between(0, len(nouns)-1)],
		adjectives[r.between(0, len(adjectives)-1)], nouns[r.between(0, len(nouns)-1)])
	return userQuestion(p, Expect{MinWords: DefaultStoryWords})
}

func genJSON(r *splitmix64, _ uint64) generated {
	c := capitals[r.between(0, len(capitals)-1)]
	g := userQuestion(label(r)+fmt.Sprintf("What is the capital of %s? Answer as a JSON object with the fields \"country\" and \"capital\".", c.country),
		Expect{ContainsAny: c.capital})
	g.schema = map[string]any{"type": "object",
		"properties": map[string]any{"country": map[string]any{"type": "string"}, "capital": map[string]any{"type": "string"}},
		"required":   []any{"country", "capital"}}
	g.expect.JSONSchema = g.schema
	return g
}

// label is a question's number of its own: a fact asked in one of few ways still reads
// differently in every run.
func label(r *splitmix64) string {
	return fmt.Sprintf("Question %d: ", r.between(100, 99999))
}

// cjkCapitals are countries and their capitals in Chinese.
var cjkCapitals = [][2]string{
	{"日本", "东京"}, {"法国", "巴黎"}, {"德国", "柏林"}, {"意大利", "罗马"}, {"英国", "伦敦"},
	{"俄罗斯", "莫斯科"}, {"埃及", "开罗"}, {"西班牙", "马德里"}, {"韩国", "首尔"}, {"泰国", "曼谷"},
	{"希腊", "雅典"}, {"奥地利", "维也纳"}, {"挪威", "奥斯陆"}, {"葡萄牙", "里斯本"}, {"芬兰", "赫尔辛基"},
}

// prefixPreamble is the long shared preamble of a prefix-cache pair: made-up text of
// PrefixWords words holding two secret numbers.
func prefixPreamble(seed uint64, a, b string) string {
	r := rng(seed | 1)
	var sb strings.Builder
	n := 0
	for n < PrefixWords {
		if n >= PrefixWords/4 && !strings.Contains(sb.String(), "first secret") {
			sb.WriteString("Remember this: the first secret number is " + a + ". ")
		}
		if n >= 3*PrefixWords/4 && !strings.Contains(sb.String(), "second secret") {
			sb.WriteString("Remember this: the second secret number is " + b + ". ")
		}
		s := sentence(&r)
		sb.WriteString(s + " ")
		n += strings.Count(s, " ") + 1
	}
	return "Read the following text carefully.\n\n" + strings.TrimSpace(sb.String())
}
