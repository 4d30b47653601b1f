package recipe

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a position in a recipe file (1-based line and column; 0 when unknown).
type Pos struct {
	File      string
	Line, Col int
}

// String formats the position as FILE:LINE:COL.
func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Problem is one validation problem.
type Problem struct {
	Pos
	// Path is the YAML path of the offending value, e.g. "steps.weights.download.dest".
	Path string
	// Msg says what is wrong and, where it can, what to do.
	Msg string
}

// String formats the problem as FILE:LINE:COL: message (at PATH).
func (p Problem) String() string {
	if p.Path == "" {
		return fmt.Sprintf("%s: %s", p.Pos, p.Msg)
	}
	return fmt.Sprintf("%s: %s (at %s)", p.Pos, p.Msg, p.Path)
}

// Problems is every problem found in a recipe; it is an error.
type Problems []Problem

// Error lists the problems, one per line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func (ps Problems) sort() {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].File != ps[j].File {
			return ps[i].File < ps[j].File
		}
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Col < ps[j].Col
	})
}
