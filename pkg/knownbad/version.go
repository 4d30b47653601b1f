package knownbad

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a Python package version in the part of PEP 440 the table needs: a release
// (1.2.3), an optional pre-release (a, b or rc N), post-release and dev-release; a local
// part (+cu130) is ignored.
type Version struct {
	release []int
	// pre is -3 (dev only), -2 a, -1 b, 0 rc, 1 none; preN its number.
	pre, preN  int
	post, dev  int
	hasDev     bool
	hasPost    bool
	normalized string
}

// ParseVersion reads v ("9.21.0.48", "0.6.18rc4", "4.5.1", "2.9.1+cu130").
func ParseVersion(v string) (Version, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	out := Version{pre: 1, normalized: s}
	i := 0
	num := func() (int, bool) {
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i || j-i > 9 {
			return 0, false
		}
		n, _ := strconv.Atoi(s[i:j])
		i = j
		return n, true
	}
	for {
		n, ok := num()
		if !ok {
			return Version{}, fmt.Errorf("version %q: want a release such as 1.2.3", v)
		}
		out.release = append(out.release, n)
		if i < len(s) && s[i] == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
			i++
			continue
		}
		break
	}
	skipSep := func() {
		if i < len(s) && (s[i] == '.' || s[i] == '-' || s[i] == '_') {
			i++
		}
	}
	for i < len(s) {
		skipSep()
		rest := s[i:]
		var tag string
		for _, t := range []string{"rc", "c", "alpha", "a", "beta", "b", "preview", "pre", "post", "dev", "r", "rev"} {
			if strings.HasPrefix(rest, t) {
				tag = t
				break
			}
		}
		if tag == "" {
			return Version{}, fmt.Errorf("version %q: %q is not a pre-, post- or dev-release", v, rest)
		}
		i += len(tag)
		skipSep()
		n, _ := num()
		switch tag {
		case "a", "alpha":
			out.pre, out.preN = -2, n
		case "b", "beta":
			out.pre, out.preN = -1, n
		case "rc", "c", "pre", "preview":
			out.pre, out.preN = 0, n
		case "post", "r", "rev":
			out.post, out.hasPost = n, true
		case "dev":
			out.dev, out.hasDev = n, true
		}
	}
	if out.hasDev && out.pre == 1 && !out.hasPost {
		out.pre = -3 // 1.0.dev1 sorts before 1.0a1
	}
	return out, nil
}

// String is the version as parsed (lower case, without its local part).
func (v Version) String() string { return v.normalized }

// Compare returns -1, 0 or 1 as v is older than, equal to or newer than w.
func (v Version) Compare(w Version) int {
	for k := range max(len(v.release), len(w.release)) {
		a, b := at(v.release, k), at(w.release, k)
		if a != b {
			return sign(a - b)
		}
	}
	if v.pre != w.pre {
		return sign(v.pre - w.pre)
	}
	if v.preN != w.preN {
		return sign(v.preN - w.preN)
	}
	if v.hasPost != w.hasPost {
		if v.hasPost {
			return 1
		}
		return -1
	}
	if v.post != w.post {
		return sign(v.post - w.post)
	}
	if v.hasDev != w.hasDev {
		if v.hasDev {
			return -1
		}
		return 1
	}
	return sign(v.dev - w.dev)
}

func at(r []int, k int) int {
	if k < len(r) {
		return r[k]
	}
	return 0
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// Range is a comma-separated list of comparisons that must all hold: ">=9.21",
// ">=0.6.18rc4,<=0.6.18rc7", "==4.5.0".
type Range struct {
	text string
	ops  []string
	vers []Version
}

// ParseRange reads a range.
func ParseRange(s string) (Range, error) {
	r := Range{text: s}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		op := ""
		for _, o := range []string{">=", "<=", "==", "!=", ">", "<"} {
			if strings.HasPrefix(part, o) {
				op = o
				break
			}
		}
		if op == "" {
			return Range{}, fmt.Errorf("range %q: %q lacks a comparison (>=, <=, ==, !=, >, <)", s, part)
		}
		v, err := ParseVersion(strings.TrimSpace(part[len(op):]))
		if err != nil {
			return Range{}, fmt.Errorf("range %q: %w", s, err)
		}
		r.ops, r.vers = append(r.ops, op), append(r.vers, v)
	}
	return r, nil
}

// String is the range as written.
func (r Range) String() string { return r.text }

// Contains reports whether v satisfies every comparison of r.
func (r Range) Contains(v Version) bool {
	for i, op := range r.ops {
		c := v.Compare(r.vers[i])
		ok := false
		switch op {
		case ">=":
			ok = c >= 0
		case "<=":
			ok = c <= 0
		case "==":
			ok = c == 0
		case "!=":
			ok = c != 0
		case ">":
			ok = c > 0
		case "<":
			ok = c < 0
		}
		if !ok {
			return false
		}
	}
	return true
}
