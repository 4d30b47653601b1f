package jsonschema

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type sample struct {
	Name    string            `json:"name"`
	Took    time.Duration     `json:"took"`
	At      *time.Time        `json:"at,omitempty"`
	Tags    []string          `json:"tags,omitempty"`
	Extra   map[string]int    `json:"extra,omitzero"`
	Raw     json.RawMessage   `json:"raw,omitempty"`
	Skipped string            `json:"-"`
	hidden  string            //nolint:unused // unexported: not encoded
	Nested  struct{ N int }   `json:"nested"`
	Any     any               `json:"any,omitempty"`
	ByName  map[string]sample `json:"-"`
}

// TestOf: the schema mirrors encoding/json: json names, omitempty and omitzero fields
// optional, unexported and "-" fields absent, durations integers, times date-time strings
// (nullable behind a pointer), and the descriptions given by "Type.Field".
func TestOf(t *testing.T) {
	s := Of("id", "title", reflect.TypeFor[sample](), map[string]string{"sample.Name": "the name"})
	if s["$id"] != "id" || s["title"] != "title" || s["additionalProperties"] != false {
		t.Errorf("header: %v", s)
	}
	props := s["properties"].(map[string]any)
	if len(props) != 8 {
		t.Errorf("properties %v, want 8", props)
	}
	if got := props["name"].(map[string]any); got["type"] != "string" || got["description"] != "the name" {
		t.Errorf("name: %v", got)
	}
	if got := props["took"].(map[string]any); got["type"] != "integer" {
		t.Errorf("took: %v", got)
	}
	at := props["at"].(map[string]any)["anyOf"].([]any)
	if at[0].(map[string]any)["format"] != "date-time" || at[1].(map[string]any)["type"] != "null" {
		t.Errorf("at: %v", at)
	}
	if req := s["required"].([]string); !reflect.DeepEqual(req, []string{"name", "took", "nested"}) {
		t.Errorf("required %v, want name, took, nested", req)
	}
}
