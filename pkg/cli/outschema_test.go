package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The shipped schemas of report.json and `status --json` are what this build prints: a
// field added to engine.Report or to status's output without `make schema` fails here.
func TestOutputSchemaFilesAreCurrent(t *testing.T) {
	for _, name := range []string{"report", "status"} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := run(t, nil, "schema", name)
			if code != 0 {
				t.Fatalf("sglprov schema %s: exit %d: %s", name, code, stderr)
			}
			path := filepath.Join(repoRoot(t), "docs", name+".schema.json")
			have, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(have, []byte(stdout)) {
				t.Fatalf("docs/%s.schema.json is not what `sglprov schema %s` prints: run `make schema`", name, name)
			}
		})
	}
}

func TestSchemaUnknownNameIsUsage(t *testing.T) {
	code, _, stderr := run(t, nil, "schema", "reports")
	if code != 2 || !bytes.Contains([]byte(stderr), []byte(`unknown schema "reports"`)) {
		t.Errorf("sglprov schema reports: exit %d, %q", code, stderr)
	}
}

// Real output validates: the reports and statuses of a passing run, a failed one and a
// refused one (exit 4), and the status of a state dir with no run.
func TestReportsAndStatusValidate(t *testing.T) {
	schemas := map[string]*jsonschema.Schema{}
	for _, name := range []string{"report", "status"} {
		_, out, _ := run(t, nil, "schema", name)
		schemas[name] = compileSchemaNamed(t, name+".schema.json", []byte(out))
	}
	dir := t.TempDir()
	recipes := map[string]string{
		"ok":      "apiVersion: sglprov/v1\nname: ok\nsteps:\n  - name: a\n    command: {argv: [\"true\"]}\n",
		"failed":  "apiVersion: sglprov/v1\nname: failed\nsteps:\n  - name: a\n    command: {argv: [sh, -c, \"exit 3\"]}\n",
		"refused": "apiVersion: sglprov/v1\nname: refused\nrequires:\n  gpu: {min_count: 64}\nsteps:\n  - name: a\n    command: {argv: [\"true\"]}\n",
	}
	env := map[string]string{"SGLPROV_GPU_FIXTURE": filepath.Join(repoRoot(t), "testdata", "gpu", "h100-x8.json")}
	for name, text := range recipes {
		t.Run(name, func(t *testing.T) {
			sub := filepath.Join(dir, name)
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			r := writeRecipe(t, sub, text)
			state := filepath.Join(sub, "state")
			code, _, stderr := run(t, env, "apply", "-f", r, "--state-dir", state)
			want := map[string]int{"ok": 0, "failed": 1, "refused": 4}[name]
			if code != want {
				t.Fatalf("apply: exit %d, want %d: %s", code, want, stderr)
			}
			reports, _ := filepath.Glob(filepath.Join(state, "runs", "*", "report.json"))
			if len(reports) != 1 {
				t.Fatalf("reports: %v", reports)
			}
			b, err := os.ReadFile(reports[0])
			if err != nil {
				t.Fatal(err)
			}
			validateJSON(t, schemas["report"], b)
			code, out, _ := run(t, env, "status", "--json", "--state-dir", state)
			if code != want {
				t.Errorf("status: exit %d, want %d", code, want)
			}
			validateJSON(t, schemas["status"], []byte(out))
			if name != "ok" {
				return
			}
			// The status of the recipe once removed: it says so, exit 1.
			if code, _, stderr := run(t, env, "remove", "-f", r, "--state-dir", state); code != 0 {
				t.Fatalf("remove: exit %d: %s", code, stderr)
			}
			code, out, _ = run(t, env, "status", "--json", "--state-dir", state)
			if code != 1 || !strings.Contains(out, `"removed": "`) {
				t.Errorf("status of a removed recipe: exit %d\n%s", code, out)
			}
			validateJSON(t, schemas["status"], []byte(out))
		})
	}
	_, out, _ := run(t, nil, "status", "--json", "--state-dir", filepath.Join(dir, "none"))
	validateJSON(t, schemas["status"], []byte(out))
}

func compileSchemaNamed(t *testing.T, name string, data []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s is not JSON: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(name, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(name)
	if err != nil {
		t.Fatalf("compiling %s: %v", name, err)
	}
	return s
}

func validateJSON(t *testing.T, s *jsonschema.Schema, data []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("does not validate: %v\n%s", err, data)
	}
}
