package recipe

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldPos returns where the value of the step body's field starts: a dotted field
// ("hf.token_file") descends mappings, "args[2]" picks an item of a list. It returns
// the step's own position when the body has no such field.
func (s *Step) FieldPos(field string) Pos {
	n := s.Body
	for _, part := range strings.Split(field, ".") {
		name, idx := part, -1
		if i := strings.IndexByte(part, '['); i > 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			if v, err := strconv.Atoi(part[i+1 : len(part)-1]); err == nil {
				idx = v
			}
		}
		n = nodeAt(n, name)
		if n == nil {
			return s.Pos
		}
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				break
			}
			n = n.Content[idx]
		}
	}
	if n == nil || n.Line == 0 {
		return s.Pos
	}
	return Pos{File: s.Pos.File, Line: n.Line, Col: n.Column}
}
