package recipe

import (
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parseSteps reads the steps list into r: each step's name, needs and kind body, then
// checks that needs name steps and form no cycle.
func (p *parser) parseSteps(n *yaml.Node, r *Recipe) {
	if n.Kind != yaml.SequenceNode {
		p.addf(n, "steps", "steps must be a list, not %s", kindName(n))
		return
	}
	byName := map[string]*Step{}
	for i, sn := range n.Content {
		if s := p.parseStep(i, sn, byName, r); s != nil {
			r.Steps = append(r.Steps, s)
		}
	}
	p.checkNeeds(n, byName)
	if cycle := findCycle(r.Steps, byName); cycle != nil {
		p.addf(nil, "steps", "needs form a cycle: %s", strings.Join(cycle, " -> "))
		s := byName[cycle[0]]
		p.problems[len(p.problems)-1].Pos = s.Pos
	}
}

// parseStep reads the i-th step, sn, recording it in byName by its name; it returns nil
// when the step has no kind, or not exactly one, or one this build does not know.
func (p *parser) parseStep(i int, sn *yaml.Node, byName map[string]*Step, r *Recipe) *Step {
	path := fmt.Sprintf("steps[%d]", i)
	if sn.Kind != yaml.MappingNode {
		p.addf(sn, path, "a step must be a mapping, not %s", kindName(sn))
		return nil
	}
	s := &Step{Pos: Pos{File: p.file, Line: sn.Line, Col: sn.Column}}
	kindKeys := p.readStepFields(sn, path, s)
	if s.Name == "" {
		p.addf(sn, path+".name", "missing required field \"name\"")
	} else {
		path = "steps." + s.Name
		if prev, dup := byName[s.Name]; dup {
			p.addf(nodeAt(sn, "name"), path, "duplicate step name %q (first at line %d)", s.Name, prev.Pos.Line)
		} else {
			byName[s.Name] = s
		}
	}
	if !p.oneKind(sn, path, kindKeys) {
		return nil
	}
	newSpec, known := p.kinds[s.Kind]
	if !known {
		p.addf(kindKeys[0], path+"."+s.Kind, "unknown step kind %q (known: %s)", s.Kind, strings.Join(p.kindNames(), ", "))
		return nil
	}
	p.decodeStrict(s.Body, path+"."+s.Kind, newSpec())
	p.readBodyRefs(s, path+"."+s.Kind, r)
	return s
}

// readStepFields reads a step's name and needs into s, and takes any other key as its
// kind (the last one: Kind and Body); it returns every such key.
func (p *parser) readStepFields(sn *yaml.Node, path string, s *Step) (kindKeys []*yaml.Node) {
	for j := 0; j+1 < len(sn.Content); j += 2 {
		k, v := sn.Content[j], sn.Content[j+1]
		switch k.Value {
		case "name":
			if v.Kind != yaml.ScalarNode || !nameRE.MatchString(v.Value) {
				p.addf(v, path+".name", "step name must be a word of letters, digits, '.', '_' or '-'")
			}
			s.Name = v.Value
		case "needs":
			if v.Kind != yaml.SequenceNode {
				p.addf(v, path+".needs", "needs must be a list of step names, not %s", kindName(v))
				continue
			}
			for _, e := range v.Content {
				s.Needs = append(s.Needs, e.Value)
			}
		default:
			kindKeys = append(kindKeys, k)
			s.Kind = k.Value
			s.Body = v
		}
	}
	return kindKeys
}

// oneKind reports whether the step gives exactly one kind, reporting a problem when not.
func (p *parser) oneKind(sn *yaml.Node, path string, kindKeys []*yaml.Node) bool {
	switch len(kindKeys) {
	case 0:
		p.addf(sn, path, "step has no kind: give exactly one of %s", strings.Join(p.kindNames(), ", "))
		return false
	case 1:
		return true
	}
	names := make([]string, len(kindKeys))
	for j, k := range kindKeys {
		names[j] = k.Value
	}
	p.addf(kindKeys[1], path, "step has %d kinds (%s): give exactly one", len(kindKeys), strings.Join(names, ", "))
	return false
}

// readBodyRefs checks the templates in the step's body and records what they refer to
// in s.Refs, sorted and unique.
func (p *parser) readBodyRefs(s *Step, path string, r *Recipe) {
	refs, bad := bodyRefs(s.Body)
	for _, b := range bad {
		p.addf(b.node, path, "bad template %q: %v", b.node.Value, b.err)
	}
	for _, ref := range refs {
		p.checkRefs(ref.node, path, []string{ref.name}, r)
		s.Refs = append(s.Refs, ref.name)
	}
	s.Refs = uniqSorted(s.Refs)
}

// checkNeeds reports needs that name no step of the recipe, or the step itself.
func (p *parser) checkNeeds(n *yaml.Node, byName map[string]*Step) {
	for i, sn := range n.Content {
		if sn.Kind != yaml.MappingNode {
			continue
		}
		needs := nodeAt(sn, "needs")
		if needs == nil || needs.Kind != yaml.SequenceNode {
			continue
		}
		name := nodeAt(sn, "name")
		path := fmt.Sprintf("steps[%d].needs", i)
		if name != nil {
			path = "steps." + name.Value + ".needs"
		}
		for _, e := range needs.Content {
			if _, ok := byName[e.Value]; !ok {
				p.addf(e, path, "needs %q, but the recipe has no step of that name", e.Value)
			} else if name != nil && e.Value == name.Value {
				p.addf(e, path, "step %q needs itself", e.Value)
			}
		}
	}
}

// kindNames returns the known step kinds, sorted.
func (p *parser) kindNames() []string {
	names := make([]string, 0, len(p.kinds))
	for k := range p.kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// findCycle returns a cycle among the steps' needs (the first step again at its end), or nil.
func findCycle(steps []*Step, byName map[string]*Step) []string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(string) bool
	visit = func(n string) bool {
		color[n] = grey
		stack = append(stack, n)
		s := byName[n]
		if s != nil {
			for _, d := range s.Needs {
				if byName[d] == nil || d == n {
					continue
				}
				switch color[d] {
				case grey:
					for i, x := range stack {
						if x == d {
							found = append(append([]string{}, stack[i:]...), d)
						}
					}
					return true
				case white:
					if visit(d) {
						return true
					}
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for _, s := range steps {
		if color[s.Name] == white && visit(s.Name) {
			return found
		}
	}
	return nil
}

// uniqSorted sorts s in place and drops repeats.
func uniqSorted(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}
