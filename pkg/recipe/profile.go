// Package recipe reads sglprov recipes (apiVersion sglprov/v1): strict parsing with
// positions, vars and templating, and validation that reports every problem as
// FILE:LINE:COL: message.
package recipe

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglprov/sglprov/pkg/versions"
)

// Profile is a named set of server flags and environment, chosen by GPU facts and
// quantization.
type Profile struct {
	// Match says which hosts and models the profile is for.
	Match ProfileMatch `yaml:"match" json:"match"`
	// Args are extra server arguments, e.g. ["--attention-backend", "triton"].
	Args []string `yaml:"args" json:"args,omitempty"`
	// Env are extra environment variables for the server.
	Env map[string]string `yaml:"env" json:"env,omitempty"`
}

// ProfileMatch selects a profile: every field that is set must match.
type ProfileMatch struct {
	// ComputeCapability is an exact capability ("12.0") or a range (">=9.0,<10.0").
	ComputeCapability string `yaml:"compute_capability" json:"compute_capability,omitempty"`
	// Quantization is the server's --quantization value, e.g. "modelopt_fp4": it is
	// compared with the --quantization arg in the service step's args (not read from the
	// model). A step whose profiles all want another quantization than its args give is
	// the recipe's fault (exit 2).
	Quantization string `yaml:"quantization" json:"quantization,omitempty"`
	// Check is a command (argv, no shell) run on the host when the rest matches: the
	// profile matches only if it exits 0; otherwise the last line it printed is the
	// reason it was passed over. For profiles that need what GPU facts cannot tell (a
	// library's support for the architecture, peer access between every pair of GPUs).
	Check []string `yaml:"check" json:"check,omitempty"`
	// GPUCounts, when set, lists the GPU counts the profile is for (a layout such as
	// --tp 4 --dp-size 2 that needs exactly 8 GPUs).
	GPUCounts []int `yaml:"gpu_counts" json:"gpu_counts,omitempty"`
}

// parseProfiles reads the profiles mapping into r, checking each match.
func (p *parser) parseProfiles(n *yaml.Node, r *Recipe) {
	if n.Kind != yaml.MappingNode {
		p.addf(n, "profiles", "profiles must be a mapping of names to profiles, not %s", kindName(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "profiles." + k.Value
		if _, dup := r.Profiles[k.Value]; dup {
			p.addf(k, path, "duplicate profile %q", k.Value)
			continue
		}
		var prof Profile
		if p.decodeStrict(v, path, &prof) {
			if cc := prof.Match.ComputeCapability; cc != "" {
				if _, err := versions.ParseRange(cc); err != nil {
					p.addf(v, path+".match.compute_capability", "%v", err)
				}
			}
			if c := prof.Match.Check; len(c) > 0 && strings.TrimSpace(c[0]) == "" {
				p.addf(v, path+".match.check", "check's command (its first element) is empty")
			}
			for _, c := range prof.Match.GPUCounts {
				if c < 1 {
					p.addf(v, path+".match.gpu_counts", "GPU count %d is not a positive number", c)
				}
			}
		}
		r.Profiles[k.Value] = prof
	}
}
