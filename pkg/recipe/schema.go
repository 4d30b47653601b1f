package recipe

import (
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is the top level of a recipe file, as written. The parser accepts exactly these
// fields, and JSONSchema is made from them: a top-level field added here is known to both.
// Steps are checked against the step kinds (KindSpecs).
type File struct {
	// APIVersion is "sglprov/v1".
	APIVersion string `yaml:"apiVersion"`
	// Name is the recipe's name.
	Name string `yaml:"name"`
	// Vars are strings that templates use; --set overrides them.
	Vars map[string]string `yaml:"vars"`
	// Requires is what the host must have.
	Requires RequiresSection `yaml:"requires"`
	// Profiles are the backend profiles by name.
	Profiles map[string]Profile `yaml:"profiles"`
	// Steps are the steps, each with a name, optional needs and one kind.
	Steps []yaml.Node `yaml:"steps"`
	// Cache is the fleet cache on an OCI registry.
	Cache Cache `yaml:"cache"`
	// OnUnhealthy runs when the daemon finds the node unhealthy (drain it).
	OnUnhealthy Hook `yaml:"on_unhealthy"`
	// OnHealthy runs when the node is healthy again (undrain it).
	OnHealthy Hook `yaml:"on_healthy"`
	// Generations says where the generations of the steps that use
	// {{ .generation.dir }} are kept, and how many.
	Generations Generations `yaml:"generations"`
	// Replaces names the recipes whose services this recipe takes over on the node.
	Replaces []string `yaml:"replaces"`
	// Nodes serves one model across several nodes (SGLang's --nnodes, --node-rank and
	// --dist-init-addr).
	Nodes Nodes `yaml:"nodes"`
	// Python names the lock the Python (pip install) steps install exactly.
	Python Python `yaml:"python"`
	// Network is the retry budget of every step that reaches the network (hub downloads'
	// API requests, git clones): network.retry_for, default 10m.
	Network Network `yaml:"network"`
}

// RequiresSection is the requires section as written: what the GPUs, the driver and CUDA
// must be, and the commands the host must already have.
type RequiresSection struct {
	Requirements `yaml:",inline"`
	// Commands are the commands the host must have before any step runs, each with an
	// optional version range.
	Commands CommandRequirements `yaml:"commands"`
}

// topLevelFields returns the names of File's fields, in their order.
func topLevelFields() []string {
	t := reflect.TypeOf(File{})
	out := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		out = append(out, name)
	}
	return out
}

// SchemaID is the schema's $id.
const SchemaID = "https://github.com/sglprov/sglprov/docs/recipe.schema.json"

// durationPattern matches what time.ParseDuration reads.
const durationPattern = `^[-+]?(0|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$`

// JSONSchema returns the JSON Schema (draft-07, which editors read) of recipe files, made by reflection
// from File and the spec types of kinds: the fields, shapes and scalar types the parser
// checks. A string field takes any YAML scalar, as the parser does; templates
// ("{{ .vars.x }}") are strings. What only the parser can check (references between
// steps, templates, version ranges) is left to `sglprov validate`.
func JSONSchema(kinds KindSpecs) map[string]any {
	top := typeSchema(reflect.TypeOf(File{}))
	props := top["properties"].(map[string]any)
	docs := fieldDescriptions(reflect.TypeOf(File{}))
	props["apiVersion"] = described(map[string]any{"const": APIVersion}, docs["apiVersion"])
	props["name"] = described(map[string]any{"type": "string", "pattern": nameRE.String()}, docs["name"])
	props["vars"] = described(map[string]any{
		"type":                 "object",
		"propertyNames":        map[string]any{"pattern": varRE.String()},
		"additionalProperties": scalar(),
	}, docs["vars"])
	props["steps"] = described(map[string]any{"type": "array", "items": stepSchema(kinds)}, docs["steps"])
	top["required"] = []string{"apiVersion", "name", "steps"}
	top["$schema"] = "http://json-schema.org/draft-07/schema#"
	top["$id"] = SchemaID
	top["title"] = "sglprov recipe (" + APIVersion + ")"
	props["generations"] = generationsSchema(props["generations"])
	return top
}

// stepSchema is one step: a name, optional needs, and exactly one kind.
func stepSchema(kinds KindSpecs) map[string]any {
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	props := map[string]any{
		"name": described(map[string]any{"type": "string", "pattern": nameRE.String()},
			"The step's name, unique in the recipe: letters, digits, '.', '_' or '-'."),
		"needs": described(map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"The steps that must finish first (by name); a step runs again when one it needs ran."),
	}
	oneOf := make([]any, 0, len(names))
	for _, k := range names {
		props[k] = described(typeSchema(reflect.TypeOf(kinds[k]())), "A "+k+" step (give exactly one kind per step).")
		oneOf = append(oneOf, map[string]any{"required": []string{k}})
	}
	return map[string]any{
		"type":                 "object",
		"required":             []string{"name"},
		"properties":           props,
		"additionalProperties": false,
		"oneOf":                oneOf,
	}
}

// scalar is what a string field takes: any YAML scalar.
func scalar() map[string]any {
	return map[string]any{"type": []string{"string", "number", "boolean"}}
}

var (
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
	yamlNodeType    = reflect.TypeOf(yaml.Node{})
)

// typeSchema mirrors the parser's strict check of t (see check in strict.go).
func typeSchema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return map[string]any{} // the type checks itself
	}
	if t == durationType {
		return map[string]any{"type": "string", "pattern": durationPattern}
	}
	if t == yamlNodeType {
		return map[string]any{} // kept as YAML, checked where it is used
	}
	switch t.Kind() {
	case reflect.Struct:
		props := map[string]any{}
		docs := fieldDescriptions(t)
		for name, f := range yamlFields(t) {
			props[name] = described(typeSchema(f.Type), docs[name])
		}
		return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem())}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": typeSchema(t.Elem())}
	case reflect.String:
		return scalar()
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	}
	return map[string]any{}
}

// described adds description to a property's schema ("" adds none).
func described(schema map[string]any, description string) map[string]any {
	if description != "" {
		schema["description"] = description
	}
	return schema
}

// fieldDescriptions returns the doc comments of t's fields by their YAML names, inline
// fields' own included (see fieldDocs, made from the source by go run
// ./internal/fielddocs/gen).
func fieldDescriptions(t reflect.Type) map[string]string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]string{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range fieldDescriptions(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if d := fieldDocs[t.PkgPath()+"."+t.Name()+"."+f.Name]; d != "" {
			out[name] = d
		}
	}
	return out
}
