package node_test

import (
	"testing"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/node"
)

// The node-wide claims are at the fixed path (under --root), moved by the environment,
// and not kept for a fixture's GPUs.
func TestClaimsDir(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		root string
		want string
	}{
		{nil, "", "/var/lib/sglprov/gpu-claims"},
		{nil, "/srv/node", "/srv/node/var/lib/sglprov/gpu-claims"},
		{map[string]string{node.ClaimsDirEnv: "/tmp/claims"}, "", "/tmp/claims"},
		{map[string]string{gpu.FixtureEnv: "x.json"}, "", ""},
		{map[string]string{gpu.FixtureEnv: "x.json", node.ClaimsDirEnv: "/tmp/claims"}, "", "/tmp/claims"},
	} {
		if got := node.ClaimsDir(func(k string) string { return tt.env[k] }, tt.root); got != tt.want {
			t.Errorf("env %v, root %q: %q, want %q", tt.env, tt.root, got, tt.want)
		}
	}
}
