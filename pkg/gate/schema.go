// The JSON-schema subset the gate checks answers against: the keywords a constrained
// decoder (SGLang's grammar backends) is asked to hold, and that a short answer shows.

package gate

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
)

// schemaKeywords are the keywords validateJSON checks; others are refused in a case's
// schema so that nothing a recipe asks is silently left unchecked.
var schemaKeywords = map[string]bool{"type": true, "properties": true, "required": true, "items": true,
	"enum": true, "minimum": true, "maximum": true, "minLength": true, "maxLength": true,
	"additionalProperties": true, "description": true, "title": true, "minItems": true, "maxItems": true}

// checkSchema checks that s uses only the keywords the gate validates.
func checkSchema(s map[string]any, at string) error {
	for k, v := range s {
		if !schemaKeywords[k] {
			return fmt.Errorf("%s: keyword %q is not one the gate checks (%s)", at, k, strings.Join(schemaKeywordList(), ", "))
		}
		switch k {
		case "type":
			if _, ok := v.(string); !ok {
				return fmt.Errorf("%s.type: want one type name", at)
			}
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("%s.properties: want an object", at)
			}
			for name, p := range props {
				ps, ok := p.(map[string]any)
				if !ok {
					return fmt.Errorf("%s.properties.%s: want a schema object", at, name)
				}
				if err := checkSchema(ps, at+".properties."+name); err != nil {
					return err
				}
			}
		case "items":
			is, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("%s.items: want a schema object", at)
			}
			if err := checkSchema(is, at+".items"); err != nil {
				return err
			}
		}
	}
	if _, err := json.Marshal(s); err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	return nil
}

func schemaKeywordList() []string {
	m := schemaKeywords
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validateJSON returns why v (decoded with UseNumber off) does not hold schema s, or "".
func validateJSON(v any, s map[string]any, at string) string {
	if t, ok := s["type"].(string); ok {
		if !jsonType(v, t) {
			return fmt.Sprintf("%s is %s, the schema asks for %s", at, jsonTypeName(v), t)
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if reflect.DeepEqual(normalize(e), v) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Sprintf("%s is not one of the schema's enum", at)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				name, _ := r.(string)
				if _, ok := x[name]; !ok {
					return fmt.Sprintf("%s has no %q, which the schema requires", at, name)
				}
			}
		}
		for name, val := range x {
			ps, ok := props[name].(map[string]any)
			if !ok {
				if ap, ok := s["additionalProperties"].(bool); ok && !ap {
					return fmt.Sprintf("%s has %q, which the schema does not allow", at, name)
				}
				continue
			}
			if why := validateJSON(val, ps, at+"."+name); why != "" {
				return why
			}
		}
	case []any:
		if n, ok := num(s["minItems"]); ok && float64(len(x)) < n {
			return fmt.Sprintf("%s has %d items, the schema asks for at least %g", at, len(x), n)
		}
		if n, ok := num(s["maxItems"]); ok && float64(len(x)) > n {
			return fmt.Sprintf("%s has %d items, the schema allows at most %g", at, len(x), n)
		}
		if is, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				if why := validateJSON(e, is, fmt.Sprintf("%s[%d]", at, i)); why != "" {
					return why
				}
			}
		}
	case string:
		if n, ok := num(s["minLength"]); ok && float64(len([]rune(x))) < n {
			return fmt.Sprintf("%s is shorter than the schema's minLength %g", at, n)
		}
		if n, ok := num(s["maxLength"]); ok && float64(len([]rune(x))) > n {
			return fmt.Sprintf("%s is longer than the schema's maxLength %g", at, n)
		}
	case float64:
		if n, ok := num(s["minimum"]); ok && x < n {
			return fmt.Sprintf("%s is %g, below the schema's minimum %g", at, x, n)
		}
		if n, ok := num(s["maximum"]); ok && x > n {
			return fmt.Sprintf("%s is %g, above the schema's maximum %g", at, x, n)
		}
	}
	return ""
}

// normalize makes a schema value (from YAML: ints) comparable with decoded JSON.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

func num(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func jsonType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	}
	return false
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a value"
}
