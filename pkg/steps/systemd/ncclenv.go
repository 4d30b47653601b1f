package systemd

import (
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/fitness"
	"github.com/sglprov/sglprov/pkg/nccl"
)

// hostPeerFacts returns the host-fitness view of the GPUs' peer paths (topology, P2P
// status, ACS and the IOMMU) as an nccl.Source; nil without facts, and NCCL then decides.
func hostPeerFacts(env *engine.Env) nccl.Source {
	if env.Facts == nil {
		return nil
	}
	return fitness.PeerSource{Facts: env.Facts}
}

// ownEnv returns the environment the recipe gives the server with profile: the profile's,
// then the step's (which wins).
func (s *Step) ownEnv(env *engine.Env, profile string) map[string]string {
	out := map[string]string{}
	if p, ok := env.Profiles[profile]; ok && profile != "" {
		for k, v := range p.Env {
			out[k] = v
		}
	}
	for k, v := range s.spec.Env {
		out[k] = v
	}
	return out
}

// ncclDecision derives the server's NCCL environment from the host's peer-path facts and
// the recipe's own environment for profile.
func (s *Step) ncclDecision(env *engine.Env, profile string) nccl.Decision {
	return nccl.Derive(s.peerFacts(env), s.ownEnv(env, profile))
}
