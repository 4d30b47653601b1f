// Package termtest plays terminal output back as the lines a terminal would show, for
// tests of what reaches a terminal (progress bars, status lines, log lines among them).
package termtest

import (
	"regexp"
	"strconv"
)

var esc = regexp.MustCompile(`^\x1b\[(\d*)([AJK])`)

// Screen plays out (text, \r, \n, and the cursor-up, erase-below and erase-line
// sequences) on an unbounded screen and returns its lines.
func Screen(out string) []string {
	lines := []string{""}
	row, col := 0, 0
	for i := 0; i < len(out); {
		if m := esc.FindStringSubmatch(out[i:]); m != nil {
			n, _ := strconv.Atoi(m[1])
			switch m[2] {
			case "A":
				row = max(row-max(n, 1), 0)
			case "J":
				lines = lines[:row+1]
				lines[row] = cut(lines[row], col)
			case "K":
				lines[row] = cut(lines[row], col)
			}
			i += len(m[0])
			continue
		}
		r := []rune(out[i:])[0]
		switch r {
		case '\r':
			col = 0
		case '\n':
			row, col = row+1, 0
			for len(lines) <= row {
				lines = append(lines, "")
			}
		default:
			l := []rune(lines[row])
			for len(l) < col {
				l = append(l, ' ')
			}
			if col < len(l) {
				l[col] = r
			} else {
				l = append(l, r)
			}
			lines[row] = string(l)
			col++
		}
		i += len(string(r))
	}
	return lines
}

func cut(line string, col int) string {
	r := []rune(line)
	return string(r[:min(col, len(r))])
}
