package patch

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// splitLines splits b into lines that keep their line endings.
func splitLines(b []byte) []string {
	var lines []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			lines = append(lines, string(b))
			break
		}
		lines = append(lines, string(b[:i+1]))
		b = b[i+1:]
	}
	return lines
}

func show(line string) string {
	return fmt.Sprintf("%q", strings.TrimSuffix(line, "\n"))
}

// diagnose names the first line of src that differs from what frag expects, and where
// the hunk's old lines are, when they are somewhere else in the file.
func diagnose(src []byte, frag *gitdiff.TextFragment, err error) string {
	lines := splitLines(src)
	var old []string
	for _, l := range frag.Lines {
		if l.Old() {
			old = append(old, l.Line)
		}
	}
	start := int(frag.OldPosition) - 1
	if start < 0 {
		start = 0
	}
	detail := ""
	for k, want := range old {
		i := start + k
		if i >= len(lines) {
			detail = fmt.Sprintf("line %d: expected %s, found the end of the file", i+1, show(want))
			break
		}
		if lines[i] != want {
			detail = fmt.Sprintf("line %d: expected %s, found %s", i+1, show(want), show(lines[i]))
			if strings.TrimSuffix(strings.TrimSuffix(lines[i], "\n"), "\r") == strings.TrimSuffix(strings.TrimSuffix(want, "\n"), "\r") {
				detail += " (the line endings or the final newline differ)"
			}
			break
		}
	}
	if detail == "" {
		var c *gitdiff.Conflict
		if errors.As(err, &c) {
			return c.Error()
		}
		return err.Error()
	}
	if len(old) > 0 {
		for s := 0; s+len(old) <= len(lines); s++ {
			if s == start {
				continue
			}
			if equalAt(lines, s, old) {
				detail += fmt.Sprintf("; the hunk's lines are at line %d instead (the file has drifted; patches apply only at the lines their hunks name, without offset or fuzz)", s+1)
				break
			}
		}
	}
	return detail
}

func equalAt(lines []string, s int, want []string) bool {
	for k, w := range want {
		if lines[s+k] != w {
			return false
		}
	}
	return true
}
