package recipe_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
)

// fileFields are the yaml names of recipe.File's fields.
func fileFields() []string {
	t := reflect.TypeOf(recipe.File{})
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		out = append(out, name)
	}
	return out
}

// The parser accepts exactly recipe.File's top-level fields, and the schema has exactly
// those: a top-level field cannot be added to one and not the other.
func TestTopLevelFieldsAreFileAndSchema(t *testing.T) {
	_, err := recipe.Parse("t.yaml", []byte("apiVersion: sglprov/v1\nname: t\nsteps: []\nzzz: 1\n"), testKinds(), nil)
	want := "(known: " + strings.Join(fileFields(), ", ") + ")"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("unknown field error %v; want it to list %s", err, want)
	}
	props := recipe.JSONSchema(testKinds())["properties"].(map[string]any)
	var names []string
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	fields := fileFields()
	sort.Strings(fields)
	if !reflect.DeepEqual(names, fields) {
		t.Errorf("schema top level %v, recipe.File %v", names, fields)
	}
	steps := props["steps"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)
	for kind := range testKinds() {
		if steps[kind] == nil {
			t.Errorf("step kind %s missing from the schema", kind)
		}
	}
}
