package fitness

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/nccl"
)

// PeerSource gives a service's NCCL settings (pkg/nccl) the peer-path facts of the GPUs
// it uses: blocked where P2PBlocked says so, working where every pair's P2P status is OK,
// and none where the facts have no topology (an old fixture, nvidia-smi, one GPU).
type PeerSource struct {
	Facts *gpu.Facts
	// GPUs are the indices the service uses; nil means all.
	GPUs []int
}

// PeerPathFacts implements nccl.Source.
func (s PeerSource) PeerPathFacts() (nccl.Facts, bool) {
	if s.Facts == nil || s.Facts.Topology == nil {
		return nccl.Facts{}, false
	}
	idx := indices(usedGPUs(s.Facts, s.GPUs))
	if len(idx) < 2 {
		return nccl.Facts{}, false
	}
	if why := P2PBlocked(s.Facts, idx); why != "" {
		return nccl.Facts{PeerPath: nccl.Blocked, Detail: why}, true
	}
	pairs := len(idx) * (len(idx) - 1) / 2
	for i := 0; i < len(idx); i++ {
		for j := i + 1; j < len(idx); j++ {
			if _, ok := s.Facts.LinkBetween(idx[i], idx[j]); !ok {
				return nccl.Facts{}, false
			}
		}
	}
	return nccl.Facts{PeerPath: nccl.Works, Detail: fmt.Sprintf("NVML: P2P read and write OK between all %d pairs", pairs)}, true
}
