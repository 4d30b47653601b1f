package recipe

import "testing"

// Every top-level field of the schema is read by exactly one parser: none is accepted
// and then silently dropped, none read twice.
func TestEveryTopLevelFieldHasOneParser(t *testing.T) {
	later := map[string]bool{"vars": true}
	for _, f := range laterFields {
		if later[f.name] {
			t.Errorf("%s is in laterFields twice", f.name)
		}
		later[f.name] = true
	}
	for _, name := range topLevelFields() {
		_, now := fieldParsers[name]
		switch {
		case now && later[name]:
			t.Errorf("%s is read both at once and later", name)
		case !now && !later[name]:
			t.Errorf("%s is in the schema but no parser reads it", name)
		}
	}
	known := map[string]bool{}
	for _, name := range topLevelFields() {
		known[name] = true
	}
	for name := range fieldParsers {
		if !known[name] {
			t.Errorf("fieldParsers reads %s, which the schema does not have", name)
		}
	}
	for name := range later {
		if !known[name] {
			t.Errorf("%s is read later, but the schema does not have it", name)
		}
	}
}
