package smoke

import (
	"bytes"
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

// parseToolCalls reads an OpenAI tool_calls list; null, absent or [] is no call. A call's
// function.arguments must be a JSON string holding the arguments as JSON text, as the
// OpenAI protocol defines it: a client that parses the string fails on an object sent
// in its place, so the gate fails it too.
func parseToolCalls(raw json.RawMessage) ([]ToolCall, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []struct {
		Type     string `json:"type"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("tool_calls is not a list of calls: %s", Sample(string(raw), SampleRunes))
	}
	out := make([]ToolCall, 0, len(list))
	for _, c := range list {
		raw := bytes.TrimSpace(c.Function.Arguments)
		var args string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &args) != nil {
			return nil, fmt.Errorf("tool call %s: function.arguments is %s, not a string holding JSON as the OpenAI protocol defines it: %s",
				c.Function.Name, jsonType(raw), Sample(string(raw), SampleRunes))
		}
		out = append(out, ToolCall{Name: c.Function.Name, Arguments: args})
	}
	return out, nil
}

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
