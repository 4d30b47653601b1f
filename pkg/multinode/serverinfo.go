package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/sglargs"
)

// ServerInfo reads what the head's server says it runs: SGLang's GET /server_info at url
// (the head's API), a JSON object of its ServerArgs fields (attention_backend,
// fp4_gemm_runner_backend, tp_size, ...; sglargs.Table names them) merged with its
// scheduler's info. A server that answers /server_info 404 is asked the older name,
// /get_server_info (a deprecated alias upstream). Only rank 0 serves it, once the group is
// up. The body is bounded (4 MiB), the time by ctx and client.
func ServerInfo(ctx context.Context, client *http.Client, url string) (map[string]any, error) {
	info, err := serverInfo(ctx, client, url, "/server_info")
	var status *StatusError
	if errors.As(err, &status) && status.Code == http.StatusNotFound {
		return serverInfo(ctx, client, url, "/get_server_info")
	}
	return info, err
}

func serverInfo(ctx context.Context, client *http.Client, url, path string) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+path, nil)
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
		return nil, fmt.Errorf("reading the head's %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Code: resp.StatusCode, Path: path}
	}
	var info map[string]any
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("reading the head's %s: %w", path, err)
	}
	return info, nil
}

// StatusError is a server info that answered another HTTP status than 200: the head's
// server runs, and says it does not serve (a broken group answers 500).
type StatusError struct {
	Code int
	// Path is the path asked (/server_info, /get_server_info).
	Path string
}

// Error names the status.
func (e *StatusError) Error() string {
	path := e.Path
	if path == "" {
		path = "/server_info"
	}
	return fmt.Sprintf("the head's %s answered HTTP %d", path, e.Code)
}

// ProfileOf returns the one candidate profile whose arguments the head's server runs with,
// judged from its server info: each flag a profile sets (--fp4-gemm-backend flashinfer_cudnn,
// or --fp4-gemm-backend=flashinfer_cudnn) must be reported under its ServerArgs field
// (sglargs.Table: fp4_gemm_runner_backend) with that value, compared by type, a flag
// without a value true. "" when no candidate matches, or more than one does (profiles
// that differ only in their environment cannot be told apart from the head's API).
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
	for _, s := range sglargs.Parse(args) {
		got, _, ok := s.Find(info)
		if !ok || !s.Same(got) {
			return false
		}
	}
	return true
}

// RankFields are the server's fields that differ by rank on one group's command lines.
var RankFields = map[string]bool{"node_rank": true}

// Differences lists the flags of args (this node's command line) whose ServerArgs field
// (sglargs.Table) the head's server info reports with another value, compared by type, as
// "--name: the head runs V, this node W". A flag the info has no field for (a flag of
// another server) is not judged, nor a field that differs by rank (RankFields). Every
// rank of a group must run one command line: a worker that joins a head running other
// arguments is no part of that group.
func Differences(info map[string]any, args []string) []string {
	var out []string
	for _, s := range sglargs.Parse(args) {
		got, field, ok := s.Find(info)
		if !ok || RankFields[field] || s.Same(got) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: the head runs %s, this node %s", s.Name, shown(got), s.Text()))
	}
	return out
}

// shown writes a server info value as a flag would give it.
func shown(v any) string {
	switch x := v.(type) {
	case nil:
		return "none"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = shown(e)
		}
		return strings.Join(parts, " ")
	case bool:
		if x {
			return "set"
		}
		return "unset"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
