package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Output schemas: `sglprov schema report` and `sglprov schema status` print the JSON
// Schemas of report.json and of `status --json`, made by reflection from the types that
// are encoded (engine.Report, statusJSON), so that the schema follows the code: a field
// added there is in the schema, and docs/report.schema.json and docs/status.schema.json
// are checked against this output by a test.

// outputSchemas are the schemas `sglprov schema NAME` prints besides the recipes'.
var outputSchemas = map[string]struct {
	id, title string
	t         reflect.Type
}{
	"report": {"https://sglprov.dev/schemas/report.schema.json", "sglprov run report (STATE_DIR/runs/<time>/report.json)", reflect.TypeFor[engine.Report]()},
	"status": {"https://sglprov.dev/schemas/status.schema.json", "sglprov status --json", reflect.TypeFor[statusJSON]()},
}

// outputSchema returns the JSON Schema (draft-07) of the JSON encoding of t.
func outputSchema(id, title string, t reflect.Type) map[string]any {
	s := jsonTypeSchema(t, map[reflect.Type]bool{})
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

// jsonTypeSchema mirrors encoding/json: exported fields under their json names, omitempty
// and omitzero fields optional, pointers nullable, time.Time an RFC 3339 string,
// time.Duration integer nanoseconds, json.RawMessage and interfaces anything.
func jsonTypeSchema(t reflect.Type, seen map[reflect.Type]bool) map[string]any {
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
		inner := jsonTypeSchema(t.Elem(), seen)
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
		return map[string]any{"type": []any{"array", "null"}, "items": jsonTypeSchema(t.Elem(), seen)}
	case reflect.Map:
		return map[string]any{"type": []any{"object", "null"}, "additionalProperties": jsonTypeSchema(t.Elem(), seen)}
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
			fs := jsonTypeSchema(f.Type, seen)
			if doc := fieldDoc(t, f.Name); doc != "" {
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

// fieldDoc is the description of a field where one is worth more than its name.
func fieldDoc(t reflect.Type, field string) string {
	return fieldDocs[t.Name()+"."+field]
}

var fieldDocs = map[string]string{
	"Report.Result":     `"ok", "failed", "interrupted", or "refused" (exit 4 or 6 before any step ran)`,
	"Report.ExitCode":   "the run's exit code (the command-line contract)",
	"Report.Duration":   "nanoseconds",
	"Report.Dir":        "the run's folder: report.json and one log per step",
	"StepReport.Result": `"ok", "failed", "skipped", "blocked", "interrupted" or "not selected"`,
	"StepReport.Details": "what the step kind records: the gate's verdict per case and profile, " +
		"a download's bytes, the profile a service installed",
	"statusJSON.ExitCode": "status's own exit code: the last run's (1 when none is recorded)",
}
