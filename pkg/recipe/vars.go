package recipe

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// varDeps returns the vars the template of var name uses.
func varDeps(r *Recipe, name string) []string {
	refs, _ := templateRefs(r.Vars[name])
	var out []string
	for _, ref := range refs {
		if v, ok := strings.CutPrefix(ref, "vars."); ok {
			if _, known := r.Vars[v]; known {
				out = append(out, v)
			}
		}
	}
	return out
}

// varCycle returns a cycle among the vars' references, or nil.
func varCycle(r *Recipe) []string {
	state := map[string]int{} // 0 unseen, 1 on the stack, 2 done
	var stack []string
	var found []string
	var visit func(string) bool
	visit = func(n string) bool {
		state[n] = 1
		stack = append(stack, n)
		for _, d := range varDeps(r, n) {
			if state[d] == 1 {
				for i, x := range stack {
					if x == d {
						found = append(append([]string{}, stack[i:]...), d)
					}
				}
				return true
			}
			if state[d] == 0 && visit(d) {
				return true
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = 2
		return false
	}
	for _, n := range r.VarOrder {
		if state[n] == 0 && visit(n) {
			return found
		}
	}
	return nil
}

// parseVars reads the vars mapping into r, and the value node of each var into nodes.
func (p *parser) parseVars(n *yaml.Node, r *Recipe, nodes map[string]*yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.addf(n, "vars", "vars must be a mapping of names to strings, not %s", kindName(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "vars." + k.Value
		if !varRE.MatchString(k.Value) {
			p.addf(k, path, "var name %q must be letters, digits and '_'", k.Value)
			continue
		}
		if _, dup := r.Vars[k.Value]; dup {
			p.addf(k, path, "duplicate var %q", k.Value)
			continue
		}
		if v.Kind != yaml.ScalarNode {
			p.addf(v, path, "var %q must be a string, not %s", k.Value, kindName(v))
			continue
		}
		r.Vars[k.Value] = v.Value
		nodes[k.Value] = v
		r.VarOrder = append(r.VarOrder, k.Value)
		r.VarPos[k.Value] = Pos{File: p.file, Line: v.Line, Col: v.Column}
	}
}

// applySets applies the --set KEY=VALUE overrides to the recipe's vars.
func (p *parser) applySets(r *Recipe, sets []string) {
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			p.problems = append(p.problems, Problem{Pos: Pos{File: "--set"}, Msg: fmt.Sprintf("--set %q: want KEY=VALUE", s)})
			continue
		}
		k = strings.TrimPrefix(k, "vars.")
		if _, known := r.Vars[k]; !known {
			p.problems = append(p.problems, Problem{Pos: Pos{File: "--set"}, Msg: fmt.Sprintf("--set %s: the recipe has no var %q (vars: %s)", k, k, varList(r))})
			continue
		}
		if !utf8.ValidString(v) {
			// A recipe file holds only UTF-8 (YAML); neither may a value given for it.
			p.problems = append(p.problems, Problem{Pos: Pos{File: "--set"}, Msg: fmt.Sprintf(
				"--set %s: the value %q is not valid UTF-8: give it in UTF-8, as the recipe file would have to", k, v)})
			continue
		}
		r.Vars[k] = v
		r.VarPos[k] = Pos{File: "--set"}
	}
}

// checkRefs reports template references to unknown vars or facts.
func (p *parser) checkRefs(at *yaml.Node, path string, refs []string, r *Recipe) {
	for _, ref := range refs {
		root, field, _ := strings.Cut(ref, ".")
		switch root {
		case "vars":
			if _, ok := r.Vars[field]; !ok {
				p.addf(at, path, "template refers to unknown var %q (vars: %s)", field, varList(r))
			}
		case "generation":
			if ref != GenerationDirRef {
				p.addf(at, path, "template refers to %q: a generation has only %q", ref, GenerationDirRef)
			}
		case "gpu", "driver", "cuda":
			if !knownFacts[ref] {
				p.addf(at, path, "template refers to unknown fact %q (facts: %s)", ref, strings.Join(FactNames(), ", "))
			}
		default:
			p.addf(at, path, "template refers to %q: templates see .vars, .gpu, .driver, .cuda and .generation", ref)
		}
	}
}

// varList names the recipe's vars for a message, the first 20 only: a message per
// problem that listed every var would make a recipe with many bad references quadratic.
func varList(r *Recipe) string {
	const most = 20
	if len(r.VarOrder) <= most {
		return strings.Join(r.VarOrder, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(r.VarOrder[:most], ", "), len(r.VarOrder)-most)
}

// checkVarTemplates checks the vars' templates: they may refer to facts and to other vars
// (a cycle among them is checked apart). varNodes, not nodeAt: a search of the mapping
// per var made validation quadratic.
func (p *parser) checkVarTemplates(r *Recipe, varNodes map[string]*yaml.Node) {
	for _, name := range r.VarOrder {
		if refs, bad := templateRefs(r.Vars[name]); bad != nil {
			p.addf(varNodes[name], "vars."+name, "bad template: %v", bad)
		} else {
			p.checkRefs(varNodes[name], "vars."+name, refs, r)
		}
	}
}
