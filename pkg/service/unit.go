package service

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// UnitFile is a parsed unit file: its sections in order.
type UnitFile struct {
	Sections []Section
}

// Section is one [Name] section of a unit file.
type Section struct {
	Name    string
	Entries []Entry
}

// Entry is one KEY=VALUE line of a section; Line is its 1-based line number.
type Entry struct {
	Key, Value string
	Line       int
}

// Values returns the values of every key in section, in order (systemd reads repeated
// keys such as Environment= as a list).
func (u *UnitFile) Values(section, key string) []string {
	var out []string
	for _, s := range u.Sections {
		if s.Name != section {
			continue
		}
		for _, e := range s.Entries {
			if e.Key == key {
				out = append(out, e.Value)
			}
		}
	}
	return out
}

// Value returns the last value of key in section (the one systemd uses for a scalar
// setting), or "" when it is not set.
func (u *UnitFile) Value(section, key string) string {
	v := u.Values(section, key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

var (
	sectionRE = regexp.MustCompile(`^\[([A-Za-z0-9-]+)\]$`)
	keyRE     = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// ParseUnit reads a unit file: comments ("#", ";"), [Section] headers, KEY=VALUE lines and
// continuation lines (a trailing backslash joins the next line with a space, as systemd
// does). A line that is none of these is an error naming its number.
func ParseUnit(content []byte) (*UnitFile, error) {
	u := &UnitFile{}
	lines := strings.Split(string(content), "\n")
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(strings.TrimSuffix(lines[i], "\r"))
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(strings.TrimSuffix(lines[i], "\r"))
			if strings.HasPrefix(next, "#") || strings.HasPrefix(next, ";") {
				continue
			}
			line = strings.TrimSuffix(line, "\\") + " " + next
		}
		switch {
		case line == "", line[0] == '#', line[0] == ';':
			continue
		case line[0] == '[':
			m := sectionRE.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("line %d: %q is not a section header", n, line)
			}
			u.Sections = append(u.Sections, Section{Name: m[1]})
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !keyRE.MatchString(k) {
			return nil, fmt.Errorf("line %d: %q is not a KEY=VALUE assignment", n, line)
		}
		if len(u.Sections) == 0 {
			return nil, fmt.Errorf("line %d: assignment %q before any section", n, k)
		}
		s := &u.Sections[len(u.Sections)-1]
		s.Entries = append(s.Entries, Entry{Key: k, Value: strings.TrimSpace(v), Line: n})
	}
	return u, nil
}

// CheckUnit checks a rendered unit's structure: it must parse (see ParseUnit), have no
// continuation lines, and hold only the sections a service unit has ([Unit], [Service],
// [Install], X- sections), each at most once. A value that started a line of its own
// shows here. The error wraps exitcode.ErrUsage.
func CheckUnit(content []byte) error {
	for i, line := range strings.Split(string(content), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasSuffix(t, "\\") && !strings.HasPrefix(t, "#") && !strings.HasPrefix(t, ";") {
			return fmt.Errorf("%w: rendered unit line %d ends with a backslash, which would join the next line", exitcode.ErrUsage, i+1)
		}
	}
	u, err := ParseUnit(content)
	if err != nil {
		return fmt.Errorf("%w: rendered unit: %w", exitcode.ErrUsage, err)
	}
	seen := map[string]bool{}
	for _, s := range u.Sections {
		switch {
		case s.Name == "Unit", s.Name == "Service", s.Name == "Install", strings.HasPrefix(s.Name, "X-"):
		default:
			return fmt.Errorf("%w: rendered unit has a section [%s], which a service unit does not have", exitcode.ErrUsage, s.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: rendered unit has section [%s] twice; a value may have started a line", exitcode.ErrUsage, s.Name)
		}
		seen[s.Name] = true
	}
	if !seen["Service"] {
		return fmt.Errorf("%w: rendered unit has no [Service] section", exitcode.ErrUsage)
	}
	return nil
}

// ParseTimespan reads a systemd time span: a bare number of seconds, "infinity", or
// numbers with units (us, ms, s, sec, m, min, h, hr, d), e.g. "1min 30s". infinity is
// returned as 0 with ok false.
func ParseTimespan(s string) (d time.Duration, ok bool, err error) {
	s = strings.TrimSpace(s)
	if s == "infinity" {
		return 0, false, nil
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(v * float64(time.Second)), true, nil
	}
	units := map[string]time.Duration{
		"us": time.Microsecond, "usec": time.Microsecond, "ms": time.Millisecond, "msec": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour, "d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	}
	rest := strings.ReplaceAll(s, " ", "")
	if rest == "" {
		return 0, false, fmt.Errorf("empty time span")
	}
	for rest != "" {
		j := 0
		for j < len(rest) && (rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.') {
			j++
		}
		k := j
		for k < len(rest) && rest[k] >= 'a' && rest[k] <= 'z' {
			k++
		}
		if j == 0 || k == j {
			return 0, false, fmt.Errorf("time span %q: want numbers with units", s)
		}
		v, err := strconv.ParseFloat(rest[:j], 64)
		if err != nil {
			return 0, false, fmt.Errorf("time span %q: %w", s, err)
		}
		unit, known := units[rest[j:k]]
		if !known {
			return 0, false, fmt.Errorf("time span %q: unknown unit %q", s, rest[j:k])
		}
		d += time.Duration(v * float64(unit))
		rest = rest[k:]
	}
	return d, true, nil
}
