package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ServerInfo reads what the head's server says it runs: SGLang's GET /get_server_info at
// url (the head's API), a JSON object of its ServerArgs fields (attention_backend,
// tp_size, ...) and its scheduler's info. Only rank 0 serves it, once the group is up.
func ServerInfo(ctx context.Context, client *http.Client, url string) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/get_server_info", nil)
	if err != nil {
		return nil, fmt.Errorf("asking the head what it runs: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking the head what it runs: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the head's /get_server_info: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Code: resp.StatusCode}
	}
	var info map[string]any
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("reading the head's /get_server_info: %w", err)
	}
	return info, nil
}

// StatusError is a /get_server_info that answered another HTTP status than 200: the head's
// server runs, and says it does not serve (a broken group answers 500).
type StatusError struct {
	Code int
}

// Error names the status.
func (e *StatusError) Error() string {
	return fmt.Sprintf("the head's /get_server_info answered HTTP %d", e.Code)
}

// ProfileOf returns the one candidate profile whose arguments the head's server runs with,
// judged from its server info: each flag a profile sets (--attention-backend triton, or
// --attention-backend=triton) must be the field of that name (attention_backend) with that
// value, a flag without a value true. "" when no candidate matches, or more than one does
// (profiles that differ only in their environment cannot be told apart from the head's
// API). An alias (--tp for tp_size) is not a field's name and never matches.
func ProfileOf(info map[string]any, candidates []string, args map[string][]string) string {
	found := ""
	for _, c := range candidates {
		if !runsWith(info, args[c]) {
			continue
		}
		if found != "" {
			return ""
		}
		found = c
	}
	return found
}

func runsWith(info map[string]any, args []string) bool {
	for _, f := range flags(args) {
		got, ok := info[f.field]
		if !ok || !sameValue(got, f) {
			return false
		}
	}
	return true
}

// flag is one --name [value] of a command line.
type flag struct {
	name, field, value string
	hasValue           bool
}

func flags(args []string) []flag {
	var out []flag
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			val, hasVal = args[i+1], true
			i++
		}
		out = append(out, flag{name: name, field: strings.ReplaceAll(name, "-", "_"), value: val, hasValue: hasVal})
	}
	return out
}

func sameValue(got any, f flag) bool {
	if !f.hasValue {
		b, isBool := got.(bool)
		return isBool && b
	}
	return fmt.Sprint(got) == f.value
}

// RankFields are the server's fields that differ by rank on one group's command lines.
var RankFields = map[string]bool{"node_rank": true}

// Differences lists the flags of args (this node's command line) whose field the head's
// server info reports with another value, as "--name: the head runs V, this node W". A
// flag the info has no field for (an alias, a flag of another server) is not judged, nor
// a field that differs by rank (RankFields). Every rank of a group must run one command
// line: a worker that joins a head running other arguments is no part of that group.
func Differences(info map[string]any, args []string) []string {
	var out []string
	for _, f := range flags(args) {
		got, ok := info[f.field]
		if !ok || RankFields[f.field] || sameValue(got, f) {
			continue
		}
		own := f.value
		if !f.hasValue {
			own = "set"
		}
		out = append(out, fmt.Sprintf("--%s: the head runs %v, this node %s", f.name, got, own))
	}
	return out
}
