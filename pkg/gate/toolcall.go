package gate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// ToolCall is one call from an answer's tool_calls.
type ToolCall struct {
	// Name is the function the model called.
	Name string `json:"name"`
	// Arguments is the call's arguments as the server sent them (JSON text).
	Arguments string `json:"arguments"`
}

// String returns name(arguments).
func (c ToolCall) String() string { return c.Name + "(" + c.Arguments + ")" }

// unmetToolCall returns why calls lack want, or "".
func unmetToolCall(calls []ToolCall, want ToolCallExpect) string {
	if len(calls) == 0 {
		return fmt.Sprintf("no tool call in tool_calls, want %s", want.Name)
	}
	var names []string
	var found *ToolCall
	for i := range calls {
		names = append(names, calls[i].Name)
		if calls[i].Name == want.Name && found == nil {
			found = &calls[i]
		}
	}
	if found == nil {
		return fmt.Sprintf("tool_calls names %s, want %s", strings.Join(names, ", "), want.Name)
	}
	var got any
	if err := json.Unmarshal([]byte(found.Arguments), &got); err != nil {
		return fmt.Sprintf("arguments of %s are not JSON: %s", want.Name, Sample(found.Arguments, SampleRunes))
	}
	gotObj, ok := got.(map[string]any)
	if !ok {
		return fmt.Sprintf("arguments of %s are not a JSON object: %s", want.Name, Sample(found.Arguments, SampleRunes))
	}
	exp, err := jsonValue(want.Arguments)
	if err != nil {
		return fmt.Sprintf("expect.tool_call.arguments: %v", err)
	}
	if exp == nil {
		return ""
	}
	if path, msg := subset(exp, gotObj, ""); msg != "" {
		return fmt.Sprintf("arguments of %s: %s%s", want.Name, path, msg)
	}
	return ""
}

// jsonValue returns v as decoded JSON (maps, []any, float64, string, bool, nil), so that
// values read from YAML compare with values read from an answer.
func jsonValue(v map[string]any) (any, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// subset reports where want is not contained in got: objects need every key of want,
// with a value that is in turn contained; anything else must be equal. It returns the
// path of the first difference and what differs there.
func subset(want, got any, path string) (string, string) {
	wm, ok := want.(map[string]any)
	if !ok {
		if !reflect.DeepEqual(want, got) {
			wb, _ := json.Marshal(want)
			gb, _ := json.Marshal(got)
			return path, fmt.Sprintf(" is %s, want %s", gb, wb)
		}
		return "", ""
	}
	gm, ok := got.(map[string]any)
	if !ok {
		gb, _ := json.Marshal(got)
		return path, fmt.Sprintf(" is %s, want an object", gb)
	}
	keys := make([]string, 0, len(wm))
	for k := range wm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		gv, ok := gm[k]
		if !ok {
			return p, " is missing"
		}
		if wp, msg := subset(wm[k], gv, p); msg != "" {
			return wp, msg
		}
	}
	return "", ""
}
