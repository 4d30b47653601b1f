package recipe

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// GenerationsOff is the value of the recipe's `generations` field that keeps every step
// in place (the folders the recipe names are built and served where they are).
const GenerationsOff = "off"

// RootKind is the step kind whose dest is a generation root by default: a source tree,
// with everything the recipe builds under it (patches, venv, build folders, wheels).
const RootKind = "source"

// GenerationRoot is a folder the recipe names that, with generations by default, is built
// inside each generation: the recipe's paths under Path are rewritten to the generation's
// folder Sub, and Path itself becomes a link to the serving generation's copy.
type GenerationRoot struct {
	// Path is the folder as the recipe names it ("/opt/sglang"), a node path.
	Path string `json:"path"`
	// Sub is its folder inside each generation ("sglang").
	Sub string `json:"sub"`

	re *regexp.Regexp // Path as a whole path in text
}

// GenerationRoots returns the folders the recipe builds inside generations by default
// (none when it names {{ .generation.dir }} itself or says `generations: off`).
func (r *Recipe) GenerationRoots() []GenerationRoot { return r.Generations.roots }

// GenerationsOff reports whether the recipe turned generations off.
func (r *Recipe) GenerationsOff() bool { return r.Generations.off }

// parseGenerationsScalar reads `generations: off`; it reports whether n was a scalar.
func (p *parser) parseGenerationsScalar(n *yaml.Node, r *Recipe) bool {
	if n.Kind != yaml.ScalarNode {
		return false
	}
	switch n.Value {
	case GenerationsOff, "false":
		r.Generations.off = true
	default:
		p.addf(n, "generations", "generations must be %q or a mapping {dir, keep}, not %q", GenerationsOff, n.Value)
	}
	return true
}

// generationsSchema is the JSON Schema of the generations field: its mapping or "off".
func generationsSchema(mapping any) any {
	out := map[string]any{"anyOf": []any{mapping, map[string]any{"const": GenerationsOff}, map[string]any{"const": false}}}
	// The field's description stays on the whole, where an editor shows it.
	if m, ok := mapping.(map[string]any); ok && m["description"] != nil {
		out["description"] = m["description"]
	}
	return out
}

// defaultGenerations makes generations the default: unless the recipe says
// `generations: off` or names {{ .generation.dir }} itself, the dest of each source step
// (rendered with the vars; a dest that uses a host fact is left in place) and each folder
// of generations.roots is a root, and every path under a root in the vars and the steps'
// text is rewritten to the same path under {{ .generation.dir }}/SUB. The steps that write there become generation steps; the
// service's unit then reads the generation's folder.
func (p *parser) defaultGenerations(r *Recipe) {
	if r.Generations.off {
		return
	}
	if r.namesGenerationDir() {
		if len(r.Generations.Roots) > 0 {
			p.addf(nil, "generations.roots", "generations.roots is for recipes that do not name {{ .%s }}: this one chooses its generation's paths itself; drop one of them", GenerationDirRef)
		}
		return
	}
	data, err := r.NewData(blankFacts())
	if err != nil {
		return
	}
	kept := outermostRoots(p.candidateRoots(r, data))
	// Each root whose path the recipe writes somewhere as text; the others stay in place.
	used := kept[:0]
	for _, root := range kept {
		if r.writesPath(root) {
			used = append(used, root)
		}
	}
	if len(used) == 0 {
		return
	}
	r.Generations.roots = used
	r.rewriteIntoGeneration(used)
}

// blankFacts returns every fact the templates know, each empty: a render with them
// succeeds, and a path that uses one is told apart by its references.
func blankFacts() map[string]any {
	facts := map[string]any{}
	for _, f := range FactNames() {
		k, v, _ := strings.Cut(f, ".")
		m, _ := facts[k].(map[string]any)
		if m == nil {
			m = map[string]any{}
			facts[k] = m
		}
		m[v] = ""
	}
	return facts
}

// candidateRoots returns the dests of the source steps (rendered with data; those that
// use a host fact or are no root path left out) and the folders of generations.roots (a
// bad one is a problem).
func (p *parser) candidateRoots(r *Recipe, data Data) []GenerationRoot {
	var roots []GenerationRoot
	for _, s := range r.Steps {
		if s.Kind != RootKind {
			continue
		}
		dest := nodeAt(s.Body, "dest")
		if dest == nil || dest.Kind != yaml.ScalarNode || usesFacts(r.ExpandRefs(s)) {
			continue
		}
		out, err := render(dest.Value, data)
		if err != nil || !rootPath(out) {
			continue
		}
		roots = append(roots, GenerationRoot{Path: out})
	}
	for _, text := range r.Generations.Roots {
		refs, _ := templateRefs(text)
		out, err := render(text, data)
		if err != nil || usesFacts(refs) || !rootPath(out) {
			p.addf(nil, "generations.roots", "generations.roots: %q must name an absolute, clean folder (vars allowed, no host facts) that is not a system folder such as /opt", text)
			continue
		}
		roots = append(roots, GenerationRoot{Path: out})
	}
	return roots
}

// outermostRoots sorts roots and keeps the outermost of nested ones (it holds the
// others), giving each a Sub folder named for it (unique: "name-2" on a clash) and the
// pattern that finds its path in text.
func outermostRoots(roots []GenerationRoot) []GenerationRoot {
	slices.SortFunc(roots, func(a, b GenerationRoot) int { return strings.Compare(a.Path, b.Path) })
	var kept []GenerationRoot
	subs := map[string]bool{}
	for _, root := range roots {
		if slices.ContainsFunc(kept, func(k GenerationRoot) bool {
			return k.Path == root.Path || strings.HasPrefix(root.Path, k.Path+"/")
		}) {
			continue
		}
		root.Sub = path.Base(root.Path)
		for i := 2; subs[root.Sub]; i++ {
			root.Sub = fmt.Sprintf("%s-%d", path.Base(root.Path), i)
		}
		subs[root.Sub] = true
		root.re = regexp.MustCompile(`(^|[^A-Za-z0-9._+@/-])` + regexp.QuoteMeta(root.Path) + `($|[^A-Za-z0-9._+@-])`)
		kept = append(kept, root)
	}
	return kept
}

// rewriteIntoGeneration rewrites every path under roots in the vars and the steps' text to
// the same path under {{ .generation.dir }}/SUB; a step so changed refers to the
// generation's folder.
func (r *Recipe) rewriteIntoGeneration(roots []GenerationRoot) {
	for name, v := range r.Vars {
		r.Vars[name] = rewriteRoots(v, roots)
	}
	for _, s := range r.Steps {
		changed := false
		eachScalar(s.Body, func(n *yaml.Node) {
			if out := rewriteRoots(n.Value, roots); out != n.Value {
				n.Value, changed = out, true
			}
		})
		if changed && !slices.Contains(s.Refs, GenerationDirRef) {
			s.Refs = uniqSorted(append(s.Refs, GenerationDirRef))
		}
	}
}

// namesGenerationDir reports whether a var or a step of the recipe names
// {{ .generation.dir }} (the recipe chose its generation's paths itself).
func (r *Recipe) namesGenerationDir() bool {
	for _, v := range r.Vars {
		if refs, _ := templateRefs(v); slices.Contains(refs, GenerationDirRef) {
			return true
		}
	}
	for _, s := range r.Steps {
		if slices.Contains(s.Refs, GenerationDirRef) {
			return true
		}
	}
	return false
}

func usesFacts(refs []string) bool {
	for _, ref := range refs {
		if knownFacts[ref] {
			return true
		}
	}
	return false
}

// SystemFolders are folders no recipe may name as a place sglprov writes into and later
// deletes from, nor as a generation root: the root and the folders of the file system
// hierarchy that hold what the system and its users keep (their subfolders may be named).
var SystemFolders = []string{
	"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/lost+found", "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap",
	"/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32",
	"/usr/lib64", "/usr/libexec", "/usr/local", "/usr/local/bin", "/usr/local/lib",
	"/usr/local/sbin", "/usr/local/share", "/usr/sbin", "/usr/share", "/usr/src", "/var",
	"/var/cache", "/var/lib", "/var/log", "/var/mail", "/var/opt", "/var/spool", "/var/tmp",
}

// rootPath reports whether p can be a generation root: absolute, clean, not a system folder.
func rootPath(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && !slices.Contains(SystemFolders, p)
}

// rewriteRoots rewrites each root in s (as a whole path: not "/opt/sglang2", not
// "/x/opt/sglang") to {{ .generation.dir }}/SUB, outside template actions.
func rewriteRoots(s string, roots []GenerationRoot) string {
	if !strings.Contains(s, "/") {
		return s
	}
	var b strings.Builder
	rest := s
	for rest != "" {
		i := strings.Index(rest, "{{")
		lit := rest
		if i >= 0 {
			lit = rest[:i]
		}
		for _, root := range roots {
			// Twice: a match takes the character after it, which may begin the next one
			// ("/opt/sglang:/opt/sglang").
			for range 2 {
				lit = root.re.ReplaceAllString(lit, "${1}{{ ."+GenerationDirRef+" }}/"+root.Sub+"${2}")
			}
		}
		b.WriteString(lit)
		if i < 0 {
			break
		}
		rest = rest[i:]
		j := strings.Index(rest, "}}")
		if j < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:j+2])
		rest = rest[j+2:]
	}
	return b.String()
}

// inPlaceGeneration gives d, when it names no generation, the folder that makes each
// default root's paths the root itself ({{ .generation.dir }}/sglang is /opt/sglang, the
// link to the serving generation): what a command that renders the recipe outside a run
// (smoke, detect, a test) sees. Roots in different folders, or a Sub that is not the root's
// own name, have no such folder; a template that needs it then fails as without facts.
func (r *Recipe) inPlaceGeneration(d Data) {
	if _, ok := d["generation"]; ok {
		return
	}
	if dir, ok := r.InPlaceGenerationDir(); ok {
		d["generation"] = map[string]any{"dir": dir}
	}
}

// InPlaceGenerationDir returns the folder that, as {{ .generation.dir }}, makes each
// default root's paths the root itself (/opt for /opt/sglang): the recipe's paths as
// written. ok is false when the recipe has no default roots, or they lie in different
// folders, or one's folder in a generation is not its own name.
func (r *Recipe) InPlaceGenerationDir() (dir string, ok bool) {
	if len(r.Generations.roots) == 0 {
		return "", false
	}
	parent := path.Dir(r.Generations.roots[0].Path)
	for _, root := range r.Generations.roots {
		if path.Dir(root.Path) != parent || path.Base(root.Path) != root.Sub {
			return "", false
		}
	}
	return parent, true
}

// writesPath reports whether a var or a step's text names root's path as rewriteRoots
// finds it.
func (r *Recipe) writesPath(root GenerationRoot) bool {
	one := []GenerationRoot{root}
	for _, v := range r.Vars {
		if rewriteRoots(v, one) != v {
			return true
		}
	}
	found := false
	for _, s := range r.Steps {
		eachScalar(s.Body, func(n *yaml.Node) {
			found = found || rewriteRoots(n.Value, one) != n.Value
		})
	}
	return found
}
