package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/sglprov/sglprov/internal/fielddocs"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/steps"
)

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// generatedSchema is what `sglprov schema` prints.
func generatedSchema(t *testing.T) []byte {
	t.Helper()
	code, stdout, stderr := run(t, nil, "schema")
	if code != 0 {
		t.Fatalf("sglprov schema: exit %d: %s", code, stderr)
	}
	return []byte(stdout)
}

func compileSchema(t *testing.T, data []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("recipe.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("recipe.schema.json")
	if err != nil {
		t.Fatalf("compiling the schema: %v", err)
	}
	return s
}

// yamlInstance turns a YAML document into the JSON value a schema validates, as an
// editor's YAML language server does.
func yamlInstance(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("YAML: %v", err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("YAML to JSON: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// The schema file the shipped recipes name is the one this build generates: a field
// added to a recipe type (or a step kind added) without regenerating it fails here.
func TestSchemaFileIsCurrent(t *testing.T) {
	path := filepath.Join(repoRoot(t), "docs", "recipe.schema.json")
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := generatedSchema(t); !bytes.Equal(have, want) {
		t.Fatalf("docs/recipe.schema.json is not what `sglprov schema` prints: run `make schema` (or go run ./cmd/sglprov schema > docs/recipe.schema.json)")
	}
}

// Every recipe the parser accepts, in the repository and in the CLI scripts, is valid
// under the schema: the schema is no stricter than sglprov. The shipped ones name it.
func TestRecipesValidateAgainstSchema(t *testing.T) {
	root := repoRoot(t)
	s := compileSchema(t, generatedSchema(t))
	kinds := steps.Specs(steps.Registry())
	docs := map[string][]byte{}
	for _, pattern := range []string{"recipes/*.yaml", "test/*/*.yaml", "testdata/*/*/*.yaml", "pkg/recipe/testdata/*/*.yaml"} {
		files, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs[strings.TrimPrefix(f, root+"/")] = b
		}
	}
	scripts, _ := filepath.Glob(filepath.Join(root, "testdata", "script", "*.txtar"))
	for _, f := range scripts {
		a, err := txtar.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range a.Files {
			if strings.HasSuffix(file.Name, ".yaml") && bytes.Contains(file.Data, []byte("apiVersion: sglprov/")) {
				docs[strings.TrimPrefix(f, root+"/")+":"+file.Name] = file.Data
			}
		}
	}
	valid := 0
	for name, data := range docs {
		if _, err := recipe.Parse(name, data, kinds, nil); err != nil {
			continue // a broken recipe on purpose (or one the parser alone refuses)
		}
		valid++
		if err := s.Validate(yamlInstance(t, data)); err != nil {
			t.Errorf("%s: sglprov accepts it, the schema does not:\n%v", name, err)
		}
	}
	if valid < 10 {
		t.Fatalf("only %d valid recipes found; the globs miss the corpus", valid)
	}
	for _, f := range []string{"recipes/demo.yaml", "recipes/qwen3.5-397b-a17b-nvfp4-sm120.yaml"} {
		first, _, _ := bytes.Cut(docs[f], []byte("\n"))
		if string(first) != "# yaml-language-server: $schema=../docs/recipe.schema.json" {
			t.Errorf("%s: the first line does not name the schema: %q", f, first)
		}
	}
}

// What the parser refuses for its shape, the schema refuses too.
func TestSchemaRefusesWhatTheParserRefuses(t *testing.T) {
	s := compileSchema(t, generatedSchema(t))
	kinds := steps.Specs(steps.Registry())
	base := "apiVersion: sglprov/v1\nname: r\n"
	for name, doc := range map[string]string{
		"unknown top-level field":  base + "colour: red\nsteps: []\n",
		"wrong apiVersion":         "apiVersion: sglprov/v2\nname: r\nsteps: []\n",
		"no steps":                 base,
		"unknown step field":       base + "steps:\n  - name: a\n    command: {argv: [x], shell: true}\n",
		"two kinds":                base + "steps:\n  - name: a\n    command: {argv: [x]}\n    build: {argv: [x]}\n",
		"no kind":                  base + "steps:\n  - name: a\n",
		"unknown kind":             base + "steps:\n  - name: a\n    compile: {argv: [x]}\n",
		"list for a string":        base + "steps:\n  - name: a\n    command: {argv: [x], dir: [a, b]}\n",
		"word for a number":        base + "steps:\n  - name: a\n    download: {dest: /x, connections: many}\n",
		"bad step name":            base + "steps:\n  - name: 'a b'\n    command: {argv: [x]}\n",
		"unknown requires field":   base + "requires: {gpus: 8}\nsteps: []\n",
		"unknown smoke case field": base + "steps:\n  - name: s\n    smoke: {url: 'http://x:1', cases: [{name: a, prompt: b, expected: c}]}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := recipe.Parse("r.yaml", []byte(doc), kinds, nil); err == nil {
				t.Fatalf("the parser accepts it; the case is wrong")
			}
			if err := s.Validate(yamlInstance(t, []byte(doc))); err == nil {
				t.Errorf("the schema accepts:\n%s", doc)
			}
		})
	}
}

// Every step kind and every field of every kind is in the schema, by reflection.
func TestSchemaHasEveryStepKind(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(generatedSchema(t), &schema); err != nil {
		t.Fatal(err)
	}
	items := schema["properties"].(map[string]any)["steps"].(map[string]any)["items"].(map[string]any)
	props := items["properties"].(map[string]any)
	for kind := range steps.Registry() {
		if _, ok := props[kind]; !ok {
			t.Errorf("step kind %q is not in the schema", kind)
		}
	}
}

// Every field of the recipes' JSON Schema carries a description (an editor shows it as
// help), made from the field's doc comment.
func TestSchemaDescribesEveryField(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(generatedSchema(t), &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(node map[string]any, path string)
	walk = func(node map[string]any, path string) {
		if props, ok := node["properties"].(map[string]any); ok {
			for name, p := range props {
				ps, _ := p.(map[string]any)
				if d, _ := ps["description"].(string); d == "" {
					t.Errorf("%s.%s has no description: give the Go field a doc comment and run make schema", path, name)
				}
				walk(ps, path+"."+name)
			}
		}
		for _, key := range []string{"items", "additionalProperties"} {
			if sub, ok := node[key].(map[string]any); ok {
				walk(sub, path+"["+key+"]")
			}
		}
	}
	walk(schema, "")
	match := schema["properties"].(map[string]any)["profiles"].(map[string]any)["additionalProperties"].(map[string]any)["properties"].(map[string]any)["match"].(map[string]any)["properties"].(map[string]any)["quantization"].(map[string]any)
	if d, _ := match["description"].(string); !strings.Contains(d, "--quantization arg in the service step's args") {
		t.Errorf("profiles.*.match.quantization does not say where it is read from: %q", d)
	}
}

// The descriptions are the doc comments as they are now.
func TestFieldDocsCurrent(t *testing.T) {
	root := repoRoot(t)
	want, err := fielddocs.Generate(fielddocs.Module, root, "recipe", fielddocs.RecipeRoots())
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, "pkg", "recipe", "fielddocs_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("pkg/recipe/fielddocs_gen.go is stale: run make schema (or go run ./internal/fielddocs/gen)")
	}
}
