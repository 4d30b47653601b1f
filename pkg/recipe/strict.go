package recipe

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

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
		if n.Kind != yaml.ScalarNode {
			p.addf(n, path, "want a duration like \"20m\", not %s", kindName(n))
		} else if _, err := time.ParseDuration(n.Value); err != nil {
			p.addf(n, path, "want a duration like \"20m\" or \"90s\", not %q", n.Value)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
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
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			p.addf(n, path, "want a mapping, not %s", kindName(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p.check(n.Content[i+1], join(path, n.Content[i].Value), t.Elem())
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			p.addf(n, path, "want a list, not %s", kindName(n))
			return
		}
		for i, e := range n.Content {
			p.check(e, fmt.Sprintf("%s[%d]", path, i), t.Elem())
		}
	case reflect.Interface:
		// any value
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			p.addf(n, path, "want a string, not %s", kindName(n))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			p.addf(n, path, "want true or false, not %s", kindName(n))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode {
			p.addf(n, path, "want a whole number, not %s", kindName(n))
		} else if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			p.addf(n, path, "want a whole number, not %q", n.Value)
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode {
			p.addf(n, path, "want a number, not %s", kindName(n))
		} else if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
			p.addf(n, path, "want a number, not %q", n.Value)
		}
	}
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
