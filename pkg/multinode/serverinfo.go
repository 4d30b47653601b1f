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
		return nil, fmt.Errorf("the head's /get_server_info answered HTTP %d", resp.StatusCode)
	}
	var info map[string]any
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("reading the head's /get_server_info: %w", err)
	}
	return info, nil
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
		got, ok := info[strings.ReplaceAll(name, "-", "_")]
		if !ok {
			return false
		}
		if !hasVal {
			if b, isBool := got.(bool); !isBool || !b {
				return false
			}
			continue
		}
		if fmt.Sprint(got) != val {
			return false
		}
	}
	return true
}
