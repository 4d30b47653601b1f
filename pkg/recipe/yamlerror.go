package recipe

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// addYAMLError reports a YAML syntax error at the line where the fault is.
func (p *parser) addYAMLError(err error, data []byte) {
	// yaml.v3 errors read "yaml: line N: message"; keep the line, unless the source shows
	// where the fault is: a tab in an indentation, or a line indented to no enclosing block
	// (yaml.v3 names the line where the block began).
	msg := err.Error()
	m := regexp.MustCompile(`line (\d+): (.*)`).FindStringSubmatch(msg)
	if m == nil {
		p.problems = append(p.problems, Problem{Pos: Pos{File: p.file}, Msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")})
		return
	}
	line, _ := strconv.Atoi(m[1])
	if l, c, ok := tabIndent(data); ok && l <= line+1 {
		p.problems = append(p.problems, Problem{Pos: Pos{File: p.file, Line: l, Col: c},
			Msg: "YAML syntax: a tab in the indentation: YAML indents with spaces only; replace the tab with spaces (" + m[2] + ")"})
		return
	}
	if l, c, levels, ok := badIndent(data); ok && l >= line {
		p.problems = append(p.problems, Problem{Pos: Pos{File: p.file, Line: l, Col: c},
			Msg: fmt.Sprintf("YAML syntax: this line is indented %d spaces, between the blocks above it at %s spaces: indent it as its siblings are (%s)", c-1, levels, m[2])})
		return
	}
	p.problems = append(p.problems, Problem{Pos: Pos{File: p.file, Line: line, Col: 1}, Msg: "YAML syntax: " + m[2]})
}

// tabIndent finds the first line whose indentation holds a tab: its line and the tab's
// column.
func tabIndent(data []byte) (line, col int, ok bool) {
	for i, l := range strings.Split(string(data), "\n") {
		for j, c := range l {
			if c == '\t' {
				return i + 1, j + 1, true
			}
			if c != ' ' {
				break
			}
		}
	}
	return 0, 0, false
}

// badIndent finds the first line (blank and comment lines aside) indented less than the
// line before it but not as much as any block that is still open: its line, the column
// of its first character and the two indentations it falls between ("4 and 6").
func badIndent(data []byte) (line, col int, between string, ok bool) {
	stack := []int{0}
	for i, l := range strings.Split(string(data), "\n") {
		t := strings.TrimLeft(l, " ")
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		ind := len(l) - len(t)
		if ind > stack[len(stack)-1] {
			stack = append(stack, ind)
			continue
		}
		popped := -1
		for len(stack) > 1 && stack[len(stack)-1] > ind {
			popped = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if top := stack[len(stack)-1]; top != ind {
			return i + 1, ind + 1, fmt.Sprintf("%d and %d", top, popped), true
		}
	}
	return 0, 0, "", false
}
