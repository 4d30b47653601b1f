package cli

import (
	"reflect"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/jsonschema"
	"github.com/sglprov/sglprov/pkg/node"
)

// Output schemas: `sglprov schema report` and `sglprov schema status` print the JSON
// Schemas of report.json and of `status --json`, made by reflection from the types that
// are encoded (engine.Report, node.Status), so that the schema follows the code: a field
// added there is in the schema, and docs/report.schema.json and docs/status.schema.json
// are checked against this output by a test.

// outputSchemas are the schemas `sglprov schema NAME` prints besides the recipes'.
var outputSchemas = map[string]struct {
	id, title string
	t         reflect.Type
}{
	"report": {"https://sglprov.dev/schemas/report.schema.json", "sglprov run report (STATE_DIR/runs/<time>/report.json)", reflect.TypeFor[engine.Report]()},
	"status": {"https://sglprov.dev/schemas/status.schema.json", "sglprov status --json", reflect.TypeFor[node.Status]()},
}

// outputSchema returns the JSON Schema (draft-07) of the JSON encoding of t, with the
// descriptions of fieldDocs.
func outputSchema(id, title string, t reflect.Type) map[string]any {
	return jsonschema.Of(id, title, t, fieldDocs)
}

// fieldDocs are the descriptions of the fields ("Type.Field") where one is worth more
// than the name.
var fieldDocs = map[string]string{
	"Report.Result":     `"ok", "failed", "interrupted", or "refused" (exit 4 or 6 before any step ran)`,
	"Report.ExitCode":   "the run's exit code (the command-line contract)",
	"Report.Duration":   "nanoseconds",
	"Report.Dir":        "the run's folder: report.json and one log per step",
	"StepReport.Result": `"ok", "failed", "skipped", "blocked", "interrupted" or "not selected"`,
	"StepReport.Details": "what the step kind records: the gate's verdict per case and profile, " +
		"a download's bytes, the profile a service installed",
	"Status.ExitCode": "status's own exit code: the last run's (1 when none is recorded)",
}
