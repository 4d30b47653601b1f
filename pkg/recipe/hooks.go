package recipe

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Hook is a program the daemon runs when the node's health changes (on_unhealthy: take
// the node out of the fleet's router or load balancer; on_healthy: put it back): an argv
// (templates allowed, no shell), run with the node's facts in its environment, killed
// after its timeout.
type Hook struct {
	// Argv is the program and its arguments; the first is looked up on the PATH.
	Argv []string `yaml:"argv"`
	// Timeout bounds one run (default 30s, at most 10m).
	Timeout time.Duration `yaml:"timeout"`
}

// Hook timeouts: the default and the most a recipe may give.
const (
	DefaultHookTimeout = 30 * time.Second
	MaxHookTimeout     = 10 * time.Minute
)

// parseHook reads an on_unhealthy or on_healthy block.
func (p *parser) parseHook(n *yaml.Node, field string, r *Recipe) *Hook {
	var h Hook
	if !p.decodeStrict(n, field, &h) {
		return nil
	}
	if len(h.Argv) == 0 || h.Argv[0] == "" {
		p.addf(n, field, "%s needs an argv: the program to run and its arguments, e.g. argv: [/usr/local/bin/lb-drain, \"{{ .vars.port }}\"]", field)
		return nil
	}
	switch {
	case h.Timeout == 0:
		h.Timeout = DefaultHookTimeout
	case h.Timeout < 0 || h.Timeout > MaxHookTimeout:
		p.addf(nodeAt(n, "timeout"), field+".timeout", "%s.timeout must be between 0 and %s, not %s", field, MaxHookTimeout, h.Timeout)
		return nil
	}
	for _, a := range h.Argv {
		refs, bad := templateRefs(a)
		if bad != nil {
			p.addf(nodeAt(n, "argv"), field+".argv", "bad template: %v", bad)
			continue
		}
		p.checkRefs(nodeAt(n, "argv"), field+".argv", refs, r)
	}
	return &h
}

// RenderArgv renders the hook's argv with d.
func (h *Hook) RenderArgv(d Data) ([]string, error) {
	out := make([]string, len(h.Argv))
	for i, a := range h.Argv {
		s, err := render(a, d)
		if err != nil {
			return nil, fmt.Errorf("rendering hook argument %q: %w", a, err)
		}
		out[i] = s
	}
	return out, nil
}
