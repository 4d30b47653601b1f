package recipe

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"text/template"
	"text/template/parse"

	"go.yaml.in/yaml/v3"
)

// knownFacts are the host facts templates may use.
var knownFacts = map[string]bool{
	"gpu.count": true, "gpu.cc": true, "gpu.arch_list": true, "gpu.memory_gib": true, "gpu.name": true,
	"gpu.sgl_kernel_cmake_args": true,
	"driver.version":            true, "cuda.version": true,
}

// FactNames returns the names of the host facts templates may use, sorted.
func FactNames() []string { return sortedKeys(knownFacts) }

// templateRefs returns the data fields a template string refers to ("vars.src",
// "gpu.count"), or the parse error.
func templateRefs(s string) ([]string, error) {
	if !strings.Contains(s, "{{") {
		return nil, nil
	}
	trees, err := parse.Parse("t", s, "{{", "}}", builtinFuncs)
	if err != nil {
		return nil, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "template: t:1: "))
	}
	var refs []string
	for _, t := range trees {
		walk(t.Root, func(ident []string) {
			if len(ident) >= 2 {
				refs = append(refs, ident[0]+"."+ident[1])
			} else if len(ident) == 1 {
				refs = append(refs, ident[0])
			}
		})
	}
	return refs, nil
}

var builtinFuncs = map[string]any{}

func walk(n parse.Node, f func([]string)) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, f)
		}
	case *parse.ActionNode:
		walk(n.Pipe, f)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, f)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, f)
		}
	case *parse.FieldNode:
		f(n.Ident)
	case *parse.ChainNode:
		walk(n.Node, f)
	case *parse.IfNode:
		walk(n.Pipe, f)
		walk(n.List, f)
		walk(n.ElseList, f)
	case *parse.RangeNode:
		walk(n.Pipe, f)
		walk(n.List, f)
		walk(n.ElseList, f)
	case *parse.WithNode:
		walk(n.Pipe, f)
		walk(n.List, f)
		walk(n.ElseList, f)
	}
}

type ref struct {
	name string
	node *yaml.Node
}

type badTemplate struct {
	node *yaml.Node
	err  error
}

// bodyRefs collects the template references of every scalar under n.
func bodyRefs(n *yaml.Node) ([]ref, []badTemplate) {
	var refs []ref
	var bad []badTemplate
	eachScalar(n, func(s *yaml.Node) {
		names, err := templateRefs(s.Value)
		if err != nil {
			bad = append(bad, badTemplate{s, err})
			return
		}
		for _, name := range names {
			refs = append(refs, ref{name, s})
		}
	})
	return refs, bad
}

func eachScalar(n *yaml.Node, f func(*yaml.Node)) {
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode {
		f(n)
		return
	}
	for _, c := range n.Content {
		eachScalar(c, f)
	}
}

// Data is what templates see: .vars, and the host facts .gpu, .driver and .cuda.
type Data map[string]any

// MaxRendered is the most text the templates of one recipe render to, its vars and every
// step's body together (16 MiB, 16 times MaxSize): vars that use each other many times
// over (v1 is v0 twice, v2 is v1 twice, ...) would otherwise make gigabytes of a few lines.
const MaxRendered = 16 << 20

// budgetKey is where Data keeps what is left of MaxRendered; no template can name it.
const budgetKey = "render budget"

// budget is what is left of MaxRendered for one Data.
type budget struct{ left atomic.Int64 }

// take spends n bytes of the budget and reports whether they were there.
func (b *budget) take(n int) bool {
	if b == nil {
		return true
	}
	return b.left.Add(-int64(n)) >= 0
}

func (d Data) budget() *budget {
	b, _ := d[budgetKey].(*budget)
	return b
}

// limitedWriter writes to w until the budget is spent.
type limitedWriter struct {
	w *bytes.Buffer
	b *budget
}

var errTooMuchText = fmt.Errorf("the templates render to more than %d MiB of text (vars that use each other many times over?)", MaxRendered>>20)

func (l limitedWriter) Write(p []byte) (int, error) {
	if !l.b.take(len(p)) {
		return 0, errTooMuchText
	}
	return l.w.Write(p)
}

// NewData returns template data with the recipe's vars rendered over facts (which may be
// nil: a template that needs a fact then fails with a clear error). The vars, and the
// steps' bodies rendered with it, make at most MaxRendered bytes of text in all.
func (r *Recipe) NewData(facts map[string]any) (Data, error) {
	d := Data{}
	for k, v := range facts {
		d[k] = v
	}
	r.inPlaceGeneration(d)
	b := &budget{}
	b.left.Store(MaxRendered)
	d[budgetKey] = b
	// Each var is rendered after the vars it uses (the parser refused cycles).
	out := map[string]string{}
	d["vars"] = out
	var renderVar func(name string, depth int) error
	renderVar = func(name string, depth int) error {
		if _, done := out[name]; done {
			return nil
		}
		if depth > len(r.VarOrder) {
			return fmt.Errorf("%s: vars.%s: vars refer to each other in a cycle", r.VarPos[name], name)
		}
		for _, dep := range varDeps(r, name) {
			if err := renderVar(dep, depth+1); err != nil {
				return err
			}
		}
		v, err := render(r.Vars[name], d)
		if err != nil {
			return fmt.Errorf("%s: rendering vars.%s: %w", r.VarPos[name], name, err)
		}
		out[name] = v
		return nil
	}
	for _, name := range r.VarOrder {
		if err := renderVar(name, 0); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Vars returns the rendered vars of d.
func (d Data) Vars() map[string]string {
	v, _ := d["vars"].(map[string]string)
	return v
}

// Lookup returns the value of a reference such as "vars.src" or "gpu.count" as text.
func (d Data) Lookup(ref string) string {
	root, field, _ := strings.Cut(ref, ".")
	switch m := d[root].(type) {
	case map[string]string:
		return m[field]
	case map[string]any:
		if v, ok := m[field]; ok {
			return fmt.Sprint(v)
		}
	}
	return ""
}

func render(s string, d Data) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	t, err := template.New("t").Option("missingkey=error").Parse(s)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(limitedWriter{&b, d.budget()}, map[string]any(d)); err != nil {
		if errors.Is(err, errTooMuchText) {
			return "", errTooMuchText
		}
		msg := err.Error()
		if strings.Contains(msg, "map has no entry for key") || strings.Contains(msg, "nil") {
			return "", fmt.Errorf("%s (are the GPU facts available? run `sglprov detect`)", strings.TrimPrefix(msg, "template: t:1:"))
		}
		return "", fmt.Errorf("%s", strings.TrimPrefix(msg, "template: t:1:"))
	}
	return b.String(), nil
}

// Render renders the templates of the step's body with d and decodes it into spec, a
// pointer to the kind's spec struct.
func (s *Step) Render(d Data, spec any) error {
	body := cloneNode(s.Body)
	var firstErr error
	eachScalar(body, func(n *yaml.Node) {
		if firstErr != nil {
			return
		}
		out, err := render(n.Value, d)
		if err != nil {
			firstErr = fmt.Errorf("%s:%d:%d: rendering %q: %w", s.Pos.File, n.Line, n.Column, n.Value, err)
			return
		}
		if out != n.Value {
			n.Value = out
			if n.Tag != "!!str" && n.Style == 0 {
				n.Tag = "" // let the decoder resolve the rendered scalar
			}
		}
	})
	if firstErr != nil {
		return firstErr
	}
	if err := body.Decode(spec); err != nil {
		return fmt.Errorf("%s: decoding step %q after rendering: %w", s.Pos, s.Name, err)
	}
	return nil
}

// BodyText returns the step's body as canonical YAML text (templates unrendered), for
// fingerprints: a change of the recipe text of a step changes it.
func (s *Step) BodyText() string {
	out, err := yaml.Marshal(s.Body)
	if err != nil {
		return fmt.Sprintf("%#v", s.Body)
	}
	return s.Kind + ":\n" + string(out)
}

func cloneNode(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = cloneNode(x)
	}
	return &c
}

// StepNames returns the names of the steps in file order.
func (r *Recipe) StepNames() []string {
	names := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		names[i] = s.Name
	}
	return names
}

// Step returns the step of that name, or nil.
func (r *Recipe) Step(name string) *Step {
	for _, s := range r.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// NeedsFacts reports whether the recipe needs GPU facts: it has requirements, a profile
// chosen by compute capability, or a template that uses a fact.
func (r *Recipe) NeedsFacts() bool {
	if r.RequiresSet {
		return true
	}
	for _, p := range r.Profiles {
		if p.Match.ComputeCapability != "" {
			return true
		}
	}
	for _, s := range r.Steps {
		for _, ref := range s.Refs {
			if !strings.HasPrefix(ref, "vars.") && ref != GenerationDirRef {
				return true
			}
		}
	}
	for _, v := range r.Vars {
		refs, _ := templateRefs(v)
		for _, ref := range refs {
			if !strings.HasPrefix(ref, "vars.") && ref != GenerationDirRef {
				return true
			}
		}
	}
	return false
}

// ExpandRefs returns the references of a step with each var reference followed by the
// facts and vars that var's own template uses, sorted: the full set of inputs outside the
// step's body that decide its rendering.
func (r *Recipe) ExpandRefs(s *Step) []string {
	seen := map[string]bool{}
	var add func(string)
	add = func(ref string) {
		if seen[ref] {
			return
		}
		seen[ref] = true
		if name, ok := strings.CutPrefix(ref, "vars."); ok {
			refs, _ := templateRefs(r.Vars[name])
			for _, x := range refs {
				add(x)
			}
		}
	}
	for _, ref := range s.Refs {
		add(ref)
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Without returns a copy of the step whose body lacks the fields at paths (a top-level key
// such as "jobs", or a key one mapping down such as "env.MAX_JOBS"), with the template
// references of what is left: the step as its fingerprint sees it, without what differs
// between identical nodes.
func (s *Step) Without(paths ...string) *Step {
	if len(paths) == 0 || s.Body == nil {
		return s
	}
	c := *s
	c.Body = cloneNode(s.Body)
	for _, p := range paths {
		parent := c.Body
		key := p
		if first, rest, ok := strings.Cut(p, "."); ok {
			parent, key = nodeAt(c.Body, first), rest
		}
		if parent == nil || parent.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(parent.Content); i += 2 {
			if parent.Content[i].Value == key {
				parent.Content = append(parent.Content[:i:i], parent.Content[i+2:]...)
				break
			}
		}
	}
	refs, _ := bodyRefs(c.Body)
	c.Refs = nil
	for _, r := range refs {
		c.Refs = append(c.Refs, r.name)
	}
	c.Refs = uniqSorted(c.Refs)
	return &c
}
