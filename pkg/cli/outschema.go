package cli

import (
	"reflect"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/jsonschema"
	"github.com/sglprov/sglprov/pkg/node"
)

// Output schemas: `sglprov schema report`, `sglprov schema status` and `sglprov schema
// plan` print the JSON Schemas of report.json, of `status --json` and of `plan --json`, made by reflection from the types that
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
	"plan":   {"https://sglprov.dev/schemas/plan.schema.json", "sglprov plan --json", reflect.TypeFor[engine.Plan]()},
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
	"Plan.ExitCode":   "plan's own exit code: 0, 4 when the host falls short (refusals lists every reason), 6 when it needs a reboot, 2 for bad input",
	"Reason.Code": `what kind of refusal: "gpu_count", "gpu_counts", "gpu_devices", "compute_capability", "gpu_memory", "gpu_total_memory", ` +
		`"driver", "cuda", "requirement", "command", "host_fitness", "gpu_claim", "nvml" (the GPUs cannot be read) or "host" (any other, its message only)`,
	"Reason.Fields": "the facts the reason names, by code: gpu_count {have, need}; gpu_counts {have, counts}; compute_capability " +
		"{gpu, name, uuid, have, need}; gpu_memory {gpu, name, uuid, have_gib, need_gib}; gpu_total_memory {gpus, have_gib, need_gib}; " +
		"driver and cuda {have, need}; requirement {field}; gpu_claim {recipe, gpus, state_dir when applied with another state dir}",
	"PlanGeneration.State": `"serving" (apply builds no other), "kept" (passed before and kept: apply goes back to it, building nothing) or "new"`,
}
