package recipe

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sglprov/sglprov/pkg/safefile"
	"github.com/sglprov/sglprov/pkg/versions"
)

// APIVersion is the only recipe version this build reads.
const APIVersion = "sglprov/v1"

// Recipe is a parsed, validated recipe.
type Recipe struct {
	// File is the path the recipe was read from (used in positions).
	File string
	// Name is the recipe's name.
	Name string
	// Vars are the recipe's variables after --set overrides, in file order (VarOrder).
	Vars     map[string]string
	VarOrder []string
	// VarPos is where each var was defined.
	VarPos map[string]Pos
	// Requires is what the host must have.
	Requires Requirements
	// RequiresSet reports whether the recipe has a requires section that asks something of
	// the GPUs, the driver or CUDA (commands alone need no GPU facts).
	RequiresSet bool
	// Commands are the commands the host must already have (requires.commands).
	Commands CommandRequirements
	// Profiles are the backend profiles by name.
	Profiles map[string]Profile
	// Steps are the steps in file order.
	Steps []*Step
	// Cache is the fleet cache block (nil when the recipe has none).
	Cache *Cache
	// Python is the python block: the lock the Python steps install (nil: none).
	Python *Python
	// OnUnhealthy and OnHealthy are the daemon's drain and undrain hooks (nil: none).
	OnUnhealthy, OnHealthy *Hook
	// Generations is the generations block (zero: the defaults).
	Generations Generations
	// Replaces names the recipes whose services this recipe's service takes over on the
	// node (a model switch).
	Replaces []string
	// Nodes is the multi-node block (nil: the service runs on this node alone).
	Nodes *Nodes
	// Network is the network block: the retry budget of the steps that reach the network
	// (nil: the default).
	Network *Network
}

// Step is one step of a recipe, with its kind body kept as YAML until it is rendered.
type Step struct {
	// Name is the step's unique name.
	Name string
	// Needs names the steps that must finish first.
	Needs []string
	// Kind is the step kind ("command", "source", ...).
	Kind string
	// Body is the YAML of the kind's body, templates unrendered.
	Body *yaml.Node
	// Pos is where the step starts.
	Pos Pos
	// Refs are the template references the body makes, e.g. "vars.src", "gpu.count",
	// sorted and unique.
	Refs []string
}

// KindSpecs maps each known step kind to a constructor of its zero spec (a pointer to a
// struct with yaml tags), used for strict decoding.
type KindSpecs map[string]func() any

// MaxSize is the largest recipe file sglprov reads (1 MiB): the shipped recipes are a few
// KiB, and a limit keeps validation time bounded.
const MaxSize = 1 << 20

// Load reads and parses the recipe at path. sets are --set KEY=VALUE overrides. A path
// that is not a regular file (a FIFO, a device) or holds more than MaxSize bytes is
// refused without reading it.
func Load(path string, kinds KindSpecs, sets []string) (*Recipe, error) {
	data, err := safefile.ReadRegular(path, MaxSize)
	if err != nil {
		return nil, fmt.Errorf("reading recipe: %w", err)
	}
	return Parse(path, data, kinds, sets)
}

// Parse parses and validates a recipe. It returns every problem it finds as Problems.
func Parse(file string, data []byte, kinds KindSpecs, sets []string) (*Recipe, error) {
	p := &parser{file: file, kinds: kinds}
	r := p.parse(data, sets)
	if len(p.problems) > 0 {
		p.problems.sort()
		return nil, p.problems
	}
	return r, nil
}

type parser struct {
	file     string
	kinds    KindSpecs
	problems Problems
}

func (p *parser) addf(n *yaml.Node, path, format string, args ...any) {
	pos := Pos{File: p.file}
	if n != nil {
		pos.Line, pos.Col = n.Line, n.Column
	}
	p.problems = append(p.problems, Problem{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	varRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (p *parser) parse(data []byte, sets []string) *Recipe {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.addYAMLError(err, data)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.addf(nil, "", "recipe is empty")
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.addf(root, "", "recipe must be a mapping, not %s", kindName(root))
		return nil
	}
	r := &Recipe{File: p.file, Vars: map[string]string{}, VarPos: map[string]Pos{}, Profiles: map[string]Profile{}}
	seen := map[string]*yaml.Node{}
	var stepsNode, varsNode, cacheNode, unhealthyNode, healthyNode, replacesNode, nodesNode *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if prev, dup := seen[k.Value]; dup {
			p.addf(k, k.Value, "duplicate field %q (first at line %d)", k.Value, prev.Line)
			continue
		}
		seen[k.Value] = k
		if !slices.Contains(topLevelFields(), k.Value) {
			p.addf(k, k.Value, "unknown field %q (known: %s)", k.Value, strings.Join(topLevelFields(), ", "))
			continue
		}
		switch k.Value {
		case "apiVersion":
			if v.Kind != yaml.ScalarNode || v.Value != APIVersion {
				p.addf(v, "apiVersion", "apiVersion must be %q, not %q", APIVersion, v.Value)
			}
		case "name":
			if v.Kind != yaml.ScalarNode || !nameRE.MatchString(v.Value) {
				p.addf(v, "name", "name must be a word of letters, digits, '.', '_' or '-'")
			}
			r.Name = v.Value
		case "vars":
			varsNode = v
		case "requires":
			gpuPart, commands := splitCommands(v)
			r.RequiresSet = commands == nil || gpuPart.Kind != yaml.MappingNode || len(gpuPart.Content) > 0
			p.decodeStrict(gpuPart, "requires", &r.Requires)
			p.checkRanges(gpuPart, &r.Requires)
			if commands != nil {
				r.Commands = p.parseCommands(commands)
			}
		case "profiles":
			p.parseProfiles(v, r)
		case "steps":
			stepsNode = v
		case "cache":
			cacheNode = v
		case "on_unhealthy":
			unhealthyNode = v
		case "on_healthy":
			healthyNode = v
		case "generations":
			p.parseGenerations(v, r)
		case "python":
			p.parsePython(v, r)
		case "replaces":
			replacesNode = v
		case "nodes":
			nodesNode = v
		case "network":
			p.parseNetwork(v, r)
		}
	}
	for _, f := range []string{"apiVersion", "name", "steps"} {
		if seen[f] == nil {
			p.addf(root, f, "missing required field %q", f)
		}
	}
	varNodes := map[string]*yaml.Node{}
	if varsNode != nil {
		p.parseVars(varsNode, r, varNodes)
	}
	p.applySets(r, sets)
	if stepsNode != nil {
		p.parseSteps(stepsNode, r)
	}
	if cacheNode != nil {
		p.parseCache(cacheNode, r)
	}
	if unhealthyNode != nil {
		r.OnUnhealthy = p.parseHook(unhealthyNode, "on_unhealthy", r)
	}
	if healthyNode != nil {
		r.OnHealthy = p.parseHook(healthyNode, "on_healthy", r)
	}
	if replacesNode != nil {
		p.parseReplaces(replacesNode, r)
	}
	if nodesNode != nil {
		p.parseNodes(nodesNode, r)
	}
	// Templates in vars may refer to facts and to other vars, without a cycle.
	// (varNodes, not nodeAt: a search of the mapping per var made validation quadratic.)
	for _, name := range r.VarOrder {
		if refs, bad := templateRefs(r.Vars[name]); bad != nil {
			p.addf(varNodes[name], "vars."+name, "bad template: %v", bad)
		} else {
			p.checkRefs(varNodes[name], "vars."+name, refs, r)
		}
	}
	if cycle := varCycle(r); cycle != nil {
		p.addf(varNodes[cycle[0]], "vars."+cycle[0], "vars refer to each other in a cycle: %s", strings.Join(cycle, " -> "))
	} else {
		p.checkNodes(r)
		p.defaultGenerations(r)
	}
	return r
}

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

func (p *parser) parseProfiles(n *yaml.Node, r *Recipe) {
	if n.Kind != yaml.MappingNode {
		p.addf(n, "profiles", "profiles must be a mapping of names to profiles, not %s", kindName(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "profiles." + k.Value
		if _, dup := r.Profiles[k.Value]; dup {
			p.addf(k, path, "duplicate profile %q", k.Value)
			continue
		}
		var prof Profile
		if p.decodeStrict(v, path, &prof) {
			if cc := prof.Match.ComputeCapability; cc != "" {
				if _, err := versions.ParseRange(cc); err != nil {
					p.addf(v, path+".match.compute_capability", "%v", err)
				}
			}
			if c := prof.Match.Check; len(c) > 0 && strings.TrimSpace(c[0]) == "" {
				p.addf(v, path+".match.check", "check's command (its first element) is empty")
			}
			for _, c := range prof.Match.GPUCounts {
				if c < 1 {
					p.addf(v, path+".match.gpu_counts", "GPU count %d is not a positive number", c)
				}
			}
		}
		r.Profiles[k.Value] = prof
	}
}

// checkRanges checks the version ranges of requires, read from the nodes themselves, so
// that a bad range is reported in the same pass as a misspelt field next to it (which
// keeps req from being decoded).
func (p *parser) checkRanges(n *yaml.Node, req *Requirements) {
	check := func(field string, at *yaml.Node) {
		if at == nil || at.Kind != yaml.ScalarNode || at.Value == "" || at.Tag == "!!null" {
			return
		}
		if _, err := versions.ParseRange(at.Value); err != nil {
			p.addf(at, field, "%v", err)
		}
	}
	check("requires.gpu.compute_capability", nodeAt(nodeAt(n, "gpu"), "compute_capability"))
	check("requires.driver", nodeAt(n, "driver"))
	check("requires.cuda", nodeAt(n, "cuda"))
	counts := Requirements{GPU: GPURequirements{MinCount: req.GPU.MinCount, Counts: req.GPU.Counts,
		CountsReason: req.GPU.CountsReason}}
	if err := counts.Validate(); err != nil {
		at := nodeAt(nodeAt(n, "gpu"), "counts")
		if at == nil {
			at = nodeAt(n, "gpu")
		}
		field, msg, _ := strings.Cut(err.Error(), ": ")
		p.addf(at, field, "%s", msg)
	}
	for _, c := range FitnessChecks() {
		if err := req.GPU.ValidatePolicy(c); err != nil {
			at := nodeAt(nodeAt(n, "gpu"), c)
			if at == nil {
				at = nodeAt(n, "gpu")
			}
			field, msg, _ := strings.Cut(err.Error(), ": ")
			p.addf(at, field, "%s", msg)
		}
	}
}

// splitCommands returns the requires mapping without its commands entry, and that entry's
// value (nil when there is none).
func splitCommands(n *yaml.Node) (rest, commands *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return n, nil
	}
	c := *n
	c.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "commands" {
			commands = n.Content[i+1]
			continue
		}
		c.Content = append(c.Content, n.Content[i], n.Content[i+1])
	}
	return &c, commands
}

// parseCommands reads requires.commands: command names mapped to {version: RANGE} or {}.
func (p *parser) parseCommands(n *yaml.Node) CommandRequirements {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.addf(n, "requires.commands", "requires.commands must be a mapping of command names to {version: RANGE}, not %s", kindName(n))
		return nil
	}
	out := CommandRequirements{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "requires.commands." + k.Value
		if !ValidCommandName(k.Value) {
			p.addf(k, path, "%q is not a command name (a name on the PATH, without a folder)", k.Value)
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.addf(k, path, "duplicate command %q", k.Value)
			continue
		}
		var req CommandRequirement
		if !p.decodeStrict(v, path, &req) {
			continue
		}
		if req.Version != "" {
			if _, err := versions.ParseRange(req.Version); err != nil {
				p.addf(nodeAt(v, "version"), path+".version", "%v", err)
			} else if !slices.Contains(VersionedCommands, k.Value) {
				p.addf(nodeAt(v, "version"), path+".version", "sglprov cannot read the version of %s (it reads %s): drop the version range, or check it in a command step",
					k.Value, strings.Join(VersionedCommands, ", "))
			}
		}
		out[k.Value] = req
	}
	return out
}

func (p *parser) parseSteps(n *yaml.Node, r *Recipe) {
	if n.Kind != yaml.SequenceNode {
		p.addf(n, "steps", "steps must be a list, not %s", kindName(n))
		return
	}
	byName := map[string]*Step{}
	for i, sn := range n.Content {
		path := fmt.Sprintf("steps[%d]", i)
		if sn.Kind != yaml.MappingNode {
			p.addf(sn, path, "a step must be a mapping, not %s", kindName(sn))
			continue
		}
		s := &Step{Pos: Pos{File: p.file, Line: sn.Line, Col: sn.Column}}
		var kindKeys []*yaml.Node
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
		switch len(kindKeys) {
		case 0:
			p.addf(sn, path, "step has no kind: give exactly one of %s", strings.Join(p.kindNames(), ", "))
			continue
		case 1:
		default:
			names := make([]string, len(kindKeys))
			for j, k := range kindKeys {
				names[j] = k.Value
			}
			p.addf(kindKeys[1], path, "step has %d kinds (%s): give exactly one", len(kindKeys), strings.Join(names, ", "))
			continue
		}
		newSpec, known := p.kinds[s.Kind]
		if !known {
			p.addf(kindKeys[0], path+"."+s.Kind, "unknown step kind %q (known: %s)", s.Kind, strings.Join(p.kindNames(), ", "))
			continue
		}
		p.decodeStrict(s.Body, path+"."+s.Kind, newSpec())
		refs, bad := bodyRefs(s.Body)
		for _, b := range bad {
			p.addf(b.node, path+"."+s.Kind, "bad template %q: %v", b.node.Value, b.err)
		}
		for _, ref := range refs {
			p.checkRefs(ref.node, path+"."+s.Kind, []string{ref.name}, r)
			s.Refs = append(s.Refs, ref.name)
		}
		s.Refs = uniqSorted(s.Refs)
		r.Steps = append(r.Steps, s)
	}
	// needs: names that exist, then no cycles.
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
	if cycle := findCycle(r.Steps, byName); cycle != nil {
		p.addf(nil, "steps", "needs form a cycle: %s", strings.Join(cycle, " -> "))
		s := byName[cycle[0]]
		p.problems[len(p.problems)-1].Pos = s.Pos
	}
}

func (p *parser) kindNames() []string {
	names := make([]string, 0, len(p.kinds))
	for k := range p.kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
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

// varList names the recipe's vars for a message, the first 20 only: a message per
// problem that listed every var would make a recipe with many bad references quadratic.
func varList(r *Recipe) string {
	const most = 20
	if len(r.VarOrder) <= most {
		return strings.Join(r.VarOrder, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(r.VarOrder[:most], ", "), len(r.VarOrder)-most)
}

// nodeAt returns the value node of key in mapping n, or nil.
func nodeAt(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the scalar %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

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
