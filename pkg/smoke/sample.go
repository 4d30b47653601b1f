package smoke

import (
	"strconv"
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
