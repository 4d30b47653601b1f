package recipe

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglprov/sglprov/pkg/safefile"
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

// parser reads one recipe file, collecting every problem it finds.
type parser struct {
	file     string
	kinds    KindSpecs
	problems Problems
}

// addf records a problem at node n (the file alone when n is nil) under path.
func (p *parser) addf(n *yaml.Node, path, format string, args ...any) {
	pos := Pos{File: p.file}
	if n != nil {
		pos.Line, pos.Col = n.Line, n.Column
	}
	p.problems = append(p.problems, Problem{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// nameRE is the form of a recipe's and a step's name; varRE of a var's.
var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	varRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// parse reads the recipe: the top-level fields, the vars with --set applied, then the
// fields that use them, and the checks across the whole.
func (p *parser) parse(data []byte, sets []string) *Recipe {
	root := p.rootMapping(data)
	if root == nil {
		return nil
	}
	r := &Recipe{File: p.file, Vars: map[string]string{}, VarPos: map[string]Pos{}, Profiles: map[string]Profile{}}
	later := p.readFields(root, r)
	varNodes := map[string]*yaml.Node{}
	if v := later["vars"]; v != nil {
		p.parseVars(v, r, varNodes)
	}
	p.applySets(r, sets)
	for _, f := range laterFields {
		if v := later[f.name]; v != nil {
			f.parse(p, v, r)
		}
	}
	p.checkVarTemplates(r, varNodes)
	if cycle := varCycle(r); cycle != nil {
		p.addf(varNodes[cycle[0]], "vars."+cycle[0], "vars refer to each other in a cycle: %s", strings.Join(cycle, " -> "))
	} else {
		p.checkNodes(r)
		p.defaultGenerations(r)
	}
	return r
}

// rootMapping decodes the YAML document and returns its top-level mapping (nil, with the
// problem reported, when there is none).
func (p *parser) rootMapping(data []byte) *yaml.Node {
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
	return root
}

// readFields reads the top-level fields in file order: those of fieldParsers at once, the
// others returned by name, to be read once the vars are. A duplicate or unknown field is a
// problem, as is a missing required one.
func (p *parser) readFields(root *yaml.Node, r *Recipe) map[string]*yaml.Node {
	seen := map[string]*yaml.Node{}
	later := map[string]*yaml.Node{}
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
		if parse, now := fieldParsers[k.Value]; now {
			parse(p, v, r)
		} else {
			later[k.Value] = v
		}
	}
	for _, f := range []string{"apiVersion", "name", "steps"} {
		if seen[f] == nil {
			p.addf(root, f, "missing required field %q", f)
		}
	}
	return later
}

// fieldParsers read the top-level fields that need nothing else of the recipe.
var fieldParsers = map[string]func(*parser, *yaml.Node, *Recipe){
	"apiVersion":  (*parser).parseAPIVersion,
	"name":        (*parser).parseName,
	"requires":    (*parser).parseRequires,
	"profiles":    (*parser).parseProfiles,
	"generations": (*parser).parseGenerations,
	"python":      (*parser).parsePython,
	"network":     (*parser).parseNetwork,
}

// laterFields read, in this order, the top-level fields whose templates may use the vars
// (read first, --set applied); "vars" itself is read apart.
var laterFields = []struct {
	name  string
	parse func(*parser, *yaml.Node, *Recipe)
}{
	{"steps", (*parser).parseSteps},
	{"cache", (*parser).parseCache},
	{"on_unhealthy", func(p *parser, v *yaml.Node, r *Recipe) { r.OnUnhealthy = p.parseHook(v, "on_unhealthy", r) }},
	{"on_healthy", func(p *parser, v *yaml.Node, r *Recipe) { r.OnHealthy = p.parseHook(v, "on_healthy", r) }},
	{"replaces", (*parser).parseReplaces},
	{"nodes", (*parser).parseNodes},
}

// parseAPIVersion checks that the recipe is of the version this build reads.
func (p *parser) parseAPIVersion(v *yaml.Node, _ *Recipe) {
	if v.Kind != yaml.ScalarNode || v.Value != APIVersion {
		p.addf(v, "apiVersion", "apiVersion must be %q, not %q", APIVersion, v.Value)
	}
}

// parseName reads the recipe's name, a word.
func (p *parser) parseName(v *yaml.Node, r *Recipe) {
	if v.Kind != yaml.ScalarNode || !nameRE.MatchString(v.Value) {
		p.addf(v, "name", "name must be a word of letters, digits, '.', '_' or '-'")
	}
	r.Name = v.Value
}

// parseRequires reads the requires section: what it asks of the GPUs, the driver and
// CUDA, and the commands the host must have.
func (p *parser) parseRequires(v *yaml.Node, r *Recipe) {
	gpuPart, commands := splitCommands(v)
	r.RequiresSet = commands == nil || gpuPart.Kind != yaml.MappingNode || len(gpuPart.Content) > 0
	p.decodeStrict(gpuPart, "requires", &r.Requires)
	p.checkRanges(gpuPart, &r.Requires)
	if commands != nil {
		r.Commands = p.parseCommands(commands)
	}
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

// kindName names what a YAML node is, for messages.
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
