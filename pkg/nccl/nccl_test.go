package nccl

import (
	"strings"
	"testing"
)

// fixed is a Source with set facts, as a host-fitness check would give them.
type fixed struct {
	f  Facts
	ok bool
}

func (s fixed) PeerPathFacts() (Facts, bool) { return s.f, s.ok }

func TestDerive(t *testing.T) {
	tests := []struct {
		name    string
		src     Source
		set     map[string]string
		wantEnv map[string]string
		reason  string
	}{
		{"no source: NCCL decides", nil, nil, map[string]string{}, "NCCL chooses"},
		{"source without facts", fixed{ok: false}, nil, map[string]string{}, "no peer-path facts"},
		{"facts say unknown", fixed{f: Facts{PeerPath: Unknown}, ok: true}, nil, map[string]string{}, "no peer-path facts"},
		{"peer paths work", fixed{f: Facts{PeerPath: Works, Detail: "all 56 pairs"}, ok: true}, nil,
			map[string]string{}, "works on this host (all 56 pairs)"},
		{"peer paths blocked", fixed{f: Facts{PeerPath: Blocked, Detail: "ACS on bridge 0000:16:02.0"}, ok: true}, nil,
			map[string]string{"NCCL_P2P_DISABLE": "1"}, "blocked on this host (ACS on bridge 0000:16:02.0)"},
		{"the recipe's own level wins over blocked facts", fixed{f: Facts{PeerPath: Blocked}, ok: true},
			map[string]string{"NCCL_P2P_LEVEL": "PHB", "NCCL_IB_DISABLE": "1"}, map[string]string{}, "NCCL_P2P_LEVEL=PHB: set by the recipe"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Derive(tc.src, tc.set)
			if len(d.Env) != len(tc.wantEnv) {
				t.Fatalf("Env = %v, want %v", d.Env, tc.wantEnv)
			}
			for k, v := range tc.wantEnv {
				if d.Env[k] != v {
					t.Errorf("Env[%s] = %q, want %q", k, d.Env[k], v)
				}
			}
			if _, ok := d.Env["NCCL_P2P_LEVEL"]; ok {
				t.Errorf("a level was forced: %v", d.Env)
			}
			if len(d.Reasons) != 1 || !strings.Contains(d.Reasons[0], tc.reason) {
				t.Errorf("Reasons = %q, want one containing %q", d.Reasons, tc.reason)
			}
		})
	}
}
