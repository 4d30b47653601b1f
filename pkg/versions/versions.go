// Package versions parses and matches the version ranges a recipe's requirements name
// (">=12.0,<13", "580.95.05", "!=12.1") and compares dotted versions. It imports
// nothing of the host, so packages that only check a range need not link NVML.
package versions

import (
	"fmt"
	"strconv"
	"strings"
)

// RangeError is a version range that does not parse. Offset is the byte offset in Input
// where the problem is, so that a caller holding the range's position in a file can point
// at the exact column.
type RangeError struct {
	// Input is the range as given.
	Input string
	// Offset is the byte offset of the problem in Input.
	Offset int
	// Msg says what is wrong.
	Msg string
}

// Error returns `invalid version range ">=9.0,,<10": empty constraint at offset 6`.
func (e *RangeError) Error() string {
	return fmt.Sprintf("invalid version range %q: %s at offset %d", e.Input, e.Msg, e.Offset)
}

// Op is the comparison of one constraint.
type Op string

// The operators of a constraint. OpExact is a bare version: "580" matches every 580.x.y,
// "12.0" matches 12.0 (and 12.0.1). OpEq does the same; OpNe is its negation.
const (
	OpExact Op = ""
	OpEq    Op = "=="
	OpNe    Op = "!="
	OpGe    Op = ">="
	OpGt    Op = ">"
	OpLe    Op = "<="
	OpLt    Op = "<"
)

// Constraint is one operator and version of a range, e.g. >=575.
type Constraint struct {
	// Op is the comparison.
	Op Op
	// Version is the version compared with, as written.
	Version string
	parts   []int
}

// Range is a conjunction of constraints: ">=9.0,<10.0" matches a version that satisfies
// both. The zero Range matches everything.
type Range struct {
	// Constraints must all hold.
	Constraints []Constraint
	raw         string
}

// ParseRange parses a version range: a bare version ("12.0", "580.95.05") or comma-joined
// constraints with the operators >=, >, <=, <, ==, != (">=9.0,<10.0", ">=575"). Spaces
// around constraints are allowed. A range that does not parse is a *RangeError.
func ParseRange(s string) (Range, error) {
	r := Range{raw: strings.TrimSpace(s)}
	if r.raw == "" {
		return Range{}, &RangeError{Input: s, Offset: 0, Msg: "empty range"}
	}
	off := 0
	for _, part := range strings.Split(s, ",") {
		c, err := parseConstraint(s, part, off)
		if err != nil {
			return Range{}, err
		}
		r.Constraints = append(r.Constraints, c)
		off += len(part) + 1
	}
	return r, nil
}

// operators is ordered so that two-character operators are tried first.
var operators = []Op{OpGe, OpLe, OpEq, OpNe, OpGt, OpLt}

func parseConstraint(input, part string, off int) (Constraint, error) {
	lead := len(part) - len(strings.TrimLeft(part, " \t"))
	body := strings.TrimSpace(part)
	pos := off + lead
	if body == "" {
		return Constraint{}, &RangeError{Input: input, Offset: pos, Msg: "empty constraint"}
	}
	c := Constraint{Op: OpExact}
	for _, op := range operators {
		if strings.HasPrefix(body, string(op)) {
			c.Op = op
			break
		}
	}
	rest := body[len(c.Op):]
	vpos := pos + len(c.Op) + len(rest) - len(strings.TrimLeft(rest, " \t"))
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return Constraint{}, &RangeError{Input: input, Offset: vpos, Msg: fmt.Sprintf("operator %q without a version", c.Op)}
	}
	if strings.ContainsAny(rest[:1], "<>=!") {
		return Constraint{}, &RangeError{Input: input, Offset: vpos, Msg: fmt.Sprintf("unknown operator %q", body[:len(c.Op)+1])}
	}
	parts, bad, err := parseVersion(rest)
	if err != nil {
		return Constraint{}, &RangeError{Input: input, Offset: vpos + bad, Msg: err.Error()}
	}
	c.Version = rest
	c.parts = parts
	return c, nil
}

// parseVersion splits a dotted numeric version; on error it returns the offset of the bad
// component.
func parseVersion(v string) ([]int, int, error) {
	var parts []int
	off := 0
	for _, p := range strings.Split(v, ".") {
		if p == "" {
			return nil, off, fmt.Errorf("empty component in version %q", v)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || strings.ContainsAny(p, "+-") {
			return nil, off, fmt.Errorf("version %q is not dotted numbers", v)
		}
		parts = append(parts, n)
		off += len(p) + 1
	}
	return parts, 0, nil
}

// CompareVersions compares two dotted numeric versions component by component, a missing
// component counting as 0: it returns -1, 0 or +1. "580.95.05" > "575"; "12.10" > "12.9".
// A version that does not parse sorts before every one that does.
func CompareVersions(a, b string) int {
	pa, _, errA := parseVersion(a)
	pb, _, errB := parseVersion(b)
	switch {
	case errA != nil && errB != nil:
		return strings.Compare(a, b)
	case errA != nil:
		return -1
	case errB != nil:
		return 1
	}
	return compareParts(pa, pb)
}

func compareParts(a, b []int) int {
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// hasPrefix reports whether version v begins with the components of c.
func hasPrefix(v, c []int) bool {
	if len(v) < len(c) {
		// "12" equals "12.0": compare with missing components as zero.
		return compareParts(v, c) == 0
	}
	for i := range c {
		if v[i] != c[i] {
			return false
		}
	}
	return true
}

// Match reports whether version satisfies every constraint of the range. A version that
// is not dotted numbers matches nothing (except the zero Range, which matches everything).
func (r Range) Match(version string) bool {
	if len(r.Constraints) == 0 {
		return true
	}
	v, _, err := parseVersion(strings.TrimSpace(version))
	if err != nil {
		return false
	}
	for _, c := range r.Constraints {
		if !c.match(v) {
			return false
		}
	}
	return true
}

func (c Constraint) match(v []int) bool {
	switch c.Op {
	case OpExact, OpEq:
		return hasPrefix(v, c.parts)
	case OpNe:
		return !hasPrefix(v, c.parts)
	}
	cmp := compareParts(v, c.parts)
	switch c.Op {
	case OpGe:
		return cmp >= 0
	case OpGt:
		return cmp > 0
	case OpLe:
		return cmp <= 0
	case OpLt:
		return cmp < 0
	}
	return false
}

// String returns the range as it was written, less surrounding spaces.
func (r Range) String() string {
	if r.raw != "" || len(r.Constraints) == 0 {
		return r.raw
	}
	parts := make([]string, len(r.Constraints))
	for i, c := range r.Constraints {
		parts[i] = string(c.Op) + c.Version
	}
	return strings.Join(parts, ",")
}
