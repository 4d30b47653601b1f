package gate

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sample returns a short, escaped excerpt of s for logs and reports: at most n runes of s,
// quoted as strconv.Quote does, with "…" after the closing quote when s was cut.
func Sample(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return strconv.Quote(s)
	}
	i := 0
	for k := range s {
		if i == n {
			return strconv.Quote(s[:k]) + "…"
		}
		i++
	}
	return strconv.Quote(s)
}

// SampleText undoes Sample's quoting: the excerpt as plain text, for JSON and structured
// logs that quote values themselves, and whether the answer was cut.
func SampleText(sample string) (text string, cut bool) {
	q, cut := strings.CutSuffix(sample, "…")
	t, err := strconv.Unquote(q)
	if err != nil {
		return sample, false
	}
	return t, cut
}
