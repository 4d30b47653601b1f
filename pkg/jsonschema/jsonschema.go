// Package jsonschema makes the JSON Schema of a Go type's JSON encoding by reflection, so
// that the schema of a file or an output follows the code that writes it.
package jsonschema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Of returns the JSON Schema (draft-07) of the JSON encoding of t, with id and title; docs
// describes fields, by "Type.Field" (the struct type's name), where a description is worth
// more than the name.
func Of(id, title string, t reflect.Type, docs map[string]string) map[string]any {
	s := typeSchema(t, docs, map[reflect.Type]bool{})
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["$id"] = id
	s["title"] = title
	return s
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

// typeSchema mirrors encoding/json: exported fields under their json names, omitempty
// and omitzero fields optional, pointers nullable, time.Time an RFC 3339 string,
// time.Duration integer nanoseconds, json.RawMessage and interfaces anything.
func typeSchema(t reflect.Type, docs map[string]string, seen map[reflect.Type]bool) map[string]any {
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case durationType:
		return map[string]any{"type": "integer", "description": "nanoseconds"}
	case rawType:
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.Pointer:
		inner := typeSchema(t.Elem(), docs, seen)
		return map[string]any{"anyOf": []any{inner, map[string]any{"type": "null"}}}
	case reflect.Interface:
		return map[string]any{}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		// A nil slice encodes as null.
		return map[string]any{"type": []any{"array", "null"}, "items": typeSchema(t.Elem(), docs, seen)}
	case reflect.Map:
		return map[string]any{"type": []any{"object", "null"}, "additionalProperties": typeSchema(t.Elem(), docs, seen)}
	case reflect.Struct:
		if seen[t] {
			panic(fmt.Sprintf("output schema: %s is recursive", t))
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		var required []string
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			fs := typeSchema(f.Type, docs, seen)
			if doc := docs[t.Name()+"."+f.Name]; doc != "" {
				fs["description"] = doc
			}
			props[name] = fs
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	panic(fmt.Sprintf("output schema: no JSON Schema for %s", t))
}
