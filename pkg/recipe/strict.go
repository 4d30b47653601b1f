package recipe

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// durationType is time.Duration's, which a recipe gives as "20m".
var durationType = reflect.TypeOf(time.Duration(0))

// decodeStrict checks n against the Go type of out (unknown fields, wrong shapes and
// scalar types, each with its position) and, when nothing is wrong, decodes it.
func (p *parser) decodeStrict(n *yaml.Node, path string, out any) bool {
	before := len(p.problems)
	p.check(n, path, reflect.TypeOf(out).Elem())
	if len(p.problems) > before {
		return false
	}
	if err := n.Decode(out); err != nil {
		p.addf(n, path, "%v", strings.TrimPrefix(err.Error(), "yaml: "))
		return false
	}
	return true
}

// check reports where n does not have the shape of a value of type t: a field t does not
// have, a duplicate, a mapping, list or scalar where t wants another.
func (p *parser) check(n *yaml.Node, path string, t reflect.Type) {
	if n == nil {
		return
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()) {
		return // the type checks itself
	}
	if t == durationType {
		p.checkDuration(n, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		p.checkStruct(n, path, t)
	case reflect.Map:
		p.checkMap(n, path, t)
	case reflect.Slice, reflect.Array:
		p.checkList(n, path, t)
	default:
		if scalar := scalarChecks[t.Kind()]; scalar != nil {
			if msg := scalar(n); msg != "" {
				p.addf(n, path, "%s", msg)
			}
		}
	}
}

// checkDuration reports a node that is not a duration time.ParseDuration reads.
func (p *parser) checkDuration(n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode {
		p.addf(n, path, "want a duration like \"20m\", not %s", kindName(n))
	} else if _, err := time.ParseDuration(n.Value); err != nil {
		p.addf(n, path, "want a duration like \"20m\" or \"90s\", not %q", n.Value)
	}
}

// checkStruct checks a mapping against struct type t: each field once, each known to t,
// each value of its field's type.
func (p *parser) checkStruct(n *yaml.Node, path string, t reflect.Type) {
	if n.Kind != yaml.MappingNode {
		p.addf(n, path, "want a mapping, not %s", kindName(n))
		return
	}
	fields := yamlFields(t)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			p.addf(k, join(path, k.Value), "duplicate field %q", k.Value)
			continue
		}
		seen[k.Value] = true
		f, ok := fields[k.Value]
		if !ok {
			p.addf(k, join(path, k.Value), "unknown field %q (known: %s)", k.Value, strings.Join(sortedKeys(fields), ", "))
			continue
		}
		p.check(v, join(path, k.Value), f.Type)
	}
}

// checkMap checks a mapping against map type t: each value of t's element type.
func (p *parser) checkMap(n *yaml.Node, path string, t reflect.Type) {
	if n.Kind != yaml.MappingNode {
		p.addf(n, path, "want a mapping, not %s", kindName(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		p.check(n.Content[i+1], join(path, n.Content[i].Value), t.Elem())
	}
}

// checkList checks a sequence against slice or array type t: each element of t's
// element type.
func (p *parser) checkList(n *yaml.Node, path string, t reflect.Type) {
	if n.Kind != yaml.SequenceNode {
		p.addf(n, path, "want a list, not %s", kindName(n))
		return
	}
	for i, e := range n.Content {
		p.check(e, fmt.Sprintf("%s[%d]", path, i), t.Elem())
	}
}

// scalarChecks say, for each scalar kind, what is wrong with a node given for it ("" when
// nothing is). A kind not listed (an interface) takes any value.
var scalarChecks = map[reflect.Kind]func(n *yaml.Node) string{
	reflect.String:  checkString,
	reflect.Bool:    checkBool,
	reflect.Int:     checkInt,
	reflect.Int8:    checkInt,
	reflect.Int16:   checkInt,
	reflect.Int32:   checkInt,
	reflect.Int64:   checkInt,
	reflect.Uint:    checkInt,
	reflect.Uint8:   checkInt,
	reflect.Uint16:  checkInt,
	reflect.Uint32:  checkInt,
	reflect.Uint64:  checkInt,
	reflect.Float32: checkFloat,
	reflect.Float64: checkFloat,
}

// checkString wants a scalar: YAML's numbers and booleans are strings too.
func checkString(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return "want a string, not " + kindName(n)
	}
	return ""
}

// checkBool wants true or false.
func checkBool(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return "want true or false, not " + kindName(n)
	}
	return ""
}

// checkInt wants a whole number (Go's literal forms and underscores allowed).
func checkInt(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return "want a whole number, not " + kindName(n)
	}
	if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
		return fmt.Sprintf("want a whole number, not %q", n.Value)
	}
	return ""
}

// checkFloat wants a number.
func checkFloat(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return "want a number, not " + kindName(n)
	}
	if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
		return fmt.Sprintf("want a number, not %q", n.Value)
	}
	return ""
}

func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return uniqSorted(keys)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
