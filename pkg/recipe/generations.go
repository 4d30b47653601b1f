package recipe

import (
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// GenerationDirRef is the template reference to the folder of the generation being built
// ({{ .generation.dir }}): steps whose body uses it (directly or through a var) put their
// outputs in a generation, and the served unit points into one.
const GenerationDirRef = "generation.dir"

// DefaultGenerationsDir is where generations are kept when the recipe names no folder:
// one folder per recipe below it, one per generation below that.
const DefaultGenerationsDir = "/opt/sglprov/generations"

// DefaultKeepGenerations is how many generations that passed the gate are kept when the
// recipe does not say (the serving one and the one before it).
const DefaultKeepGenerations = 2

// Generations is the recipe's generations block.
type Generations struct {
	// Dir is the folder that holds this recipe's generations (a folder per recipe is made
	// below it); default /opt/sglprov/generations.
	Dir string `yaml:"dir" json:"dir,omitempty"`
	// Keep is how many generations that passed the gate are kept (the serving one among
	// them); default 2, at least 1.
	Keep int `yaml:"keep" json:"keep,omitempty"`
	// Roots are folders built inside each generation besides the source steps' dests
	// (a venv the recipe makes without a source step), as the recipe names them; vars
	// may be used.
	Roots []string `yaml:"roots" json:"roots,omitempty"`

	// off is `generations: off`; roots the folders built inside generations by default
	// (see gendefault.go).
	off   bool
	roots []GenerationRoot
}

// GenerationsDir returns the folder of this recipe's generations (its own folder below
// the generations block's dir).
func (r *Recipe) GenerationsDir() string {
	dir := DefaultGenerationsDir
	if r.Generations.Dir != "" {
		dir = r.Generations.Dir
	}
	return path.Join(dir, r.Name)
}

// KeepGenerations returns how many passed generations to keep.
func (r *Recipe) KeepGenerations() int {
	if r.Generations.Keep > 0 {
		return r.Generations.Keep
	}
	return DefaultKeepGenerations
}

// UsesGenerations reports whether a step of the recipe puts its outputs in a generation.
func (r *Recipe) UsesGenerations() bool {
	for _, s := range r.Steps {
		if r.InGeneration(s) {
			return true
		}
	}
	return false
}

// InGeneration reports whether the step's body uses {{ .generation.dir }}, directly or
// through a var.
func (r *Recipe) InGeneration(s *Step) bool {
	return slices.Contains(r.ExpandRefs(s), GenerationDirRef)
}

func (p *parser) parseGenerations(n *yaml.Node, r *Recipe) {
	if p.parseGenerationsScalar(n, r) {
		return
	}
	var g Generations
	if !p.decodeStrict(n, "generations", &g) {
		return
	}
	if g.Keep < 0 {
		p.addf(nodeAt(n, "keep"), "generations.keep", "generations.keep must be at least 1 (the serving generation), not %d", g.Keep)
	}
	if g.Dir != "" && (!path.IsAbs(g.Dir) || strings.Contains(g.Dir, "{{")) {
		p.addf(nodeAt(n, "dir"), "generations.dir", "generations.dir must be an absolute folder without templates, not %q", g.Dir)
	}
	r.Generations = g
}

func (p *parser) parseReplaces(n *yaml.Node, r *Recipe) {
	var names []string
	if !p.decodeStrict(n, "replaces", &names) {
		return
	}
	for i, name := range names {
		at := n
		if i < len(n.Content) {
			at = n.Content[i]
		}
		switch {
		case !nameRE.MatchString(name):
			p.addf(at, "replaces", "replaces: %q is not a recipe name", name)
		case name == r.Name:
			p.addf(at, "replaces", "replaces: a recipe cannot replace itself (%q)", name)
		case slices.Contains(r.Replaces, name):
			p.addf(at, "replaces", "replaces: %q is listed twice", name)
		default:
			r.Replaces = append(r.Replaces, name)
		}
	}
}
