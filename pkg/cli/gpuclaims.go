package cli

import (
	"context"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// ClaimsDirEnv names the environment variable that moves the node-wide GPU claims.
const ClaimsDirEnv = "SGLPROV_GPU_CLAIMS_DIR"

// gpuClaimsDir is the node-wide folder of GPU claims the engine compares and records:
// SGLPROV_GPU_CLAIMS_DIR when set, else none when the GPUs are a fixture's (they are not
// the node's GPUs, and runs with fixtures on one host are not one node), else
// engine.NodeClaimsDir, under --root when given.
func gpuClaimsDir(getenv func(string) string, root string) string {
	if d := getenv(ClaimsDirEnv); d != "" {
		return d
	}
	if getenv(gpu.FixtureEnv) != "" {
		return ""
	}
	return engine.HostPath(root, engine.NodeClaimsDir)
}

// nodeGPUs returns the IDs of every GPU of the host, for a recipe that loads no GPU facts
// (it names no GPU need): its server sees every GPU, and claims them. A host where the
// GPUs cannot be read (no NVML) has none to claim.
func nodeGPUs(ctx context.Context, stdio IO) []string {
	f, err := stdio.Factory.Facts(ctx, stdio.Getenv)
	if err != nil || f == nil {
		return nil
	}
	return f.IDs()
}
