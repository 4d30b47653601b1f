// Names and patterns: the checks on a listed file's name, and the include and exclude
// globs matched against it.

package hub

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// CheckName refuses a file name that is empty, absolute, or has an empty, "." or ".."
// element, or a backslash or NUL: such a name could write outside the destination.
func CheckName(name string) error {
	if name == "" {
		return errors.New("refusing an empty file name")
	}
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("refusing file name %q: not a relative path", name)
	}
	for _, el := range strings.Split(name, "/") {
		switch el {
		case "", ".", "..":
			return fmt.Errorf("refusing file name %q: it has a %q element", name, el)
		}
	}
	return nil
}

// CheckPatterns reports a malformed glob pattern.
func CheckPatterns(patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("bad file pattern %q: %w", p, err)
		}
	}
	return nil
}

// Match reports whether name matches any of patterns. A pattern matches (with path.Match)
// the full path or the base name; "**" in a pattern also matches across "/" (as in
// "subdir/**").
func Match(patterns []string, name string) bool {
	base := path.Base(name)
	for _, p := range patterns {
		if strings.Contains(p, "**") {
			if matchDoubleStar(p, name) {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, name); ok {
			return true
		}
		if ok, _ := path.Match(p, base); ok {
			return true
		}
	}
	return false
}

// matchDoubleStar matches a pattern in which "**" stands for any run of characters,
// "/" included, and the rest has path.Match semantics per element run.
func matchDoubleStar(pattern, name string) bool {
	parts := strings.Split(pattern, "**")
	var re strings.Builder
	re.WriteString("^")
	for i, part := range parts {
		if i > 0 {
			re.WriteString(".*")
		}
		for _, r := range part {
			switch r {
			case '*':
				re.WriteString("[^/]*")
			case '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
	}
	re.WriteString("$")
	ok, err := regexp.MatchString(re.String(), name)
	return err == nil && ok
}
