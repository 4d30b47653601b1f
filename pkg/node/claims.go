package node

import (
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/gpuclaim"
	"github.com/sglprov/sglprov/pkg/reclaim"
)

// ClaimsDirEnv names the environment variable that moves the node-wide GPU claims.
const ClaimsDirEnv = "SGLPROV_GPU_CLAIMS_DIR"

// ClaimsDir is the node-wide folder of GPU claims the engine compares and records:
// SGLPROV_GPU_CLAIMS_DIR when set, else none when the GPUs are a fixture's (they are not
// the node's GPUs, and runs with fixtures on one host are not one node), else
// gpuclaim.NodeClaimsDir, under --root when given.
func ClaimsDir(getenv func(string) string, root string) string {
	if d := getenv(ClaimsDirEnv); d != "" {
		return d
	}
	if getenv(gpu.FixtureEnv) != "" {
		return ""
	}
	return engine.HostPath(root, gpuclaim.NodeClaimsDir)
}

// StateDirsEnv names the environment variable that moves the node-wide registry of state
// dirs.
const StateDirsEnv = "SGLPROV_STATE_DIRS_DIR"

// StateDirsDir is the node-wide registry of state dirs a run registers its state dir in
// and remove and gc read: SGLPROV_STATE_DIRS_DIR when set, else none when the GPUs are a
// fixture's (runs with fixtures on one host are tests, not one node), else
// engine.NodeStateDirsDir, under --root when given.
func StateDirsDir(getenv func(string) string, root string) string {
	if d := getenv(StateDirsEnv); d != "" {
		return d
	}
	if getenv(gpu.FixtureEnv) != "" {
		return ""
	}
	return engine.HostPath(root, engine.NodeStateDirsDir)
}

// Scope is where remove and gc find the node's other state dirs: the registry and the GPU
// claims.
func Scope(getenv func(string) string, root string) reclaim.NodeScope {
	return reclaim.NodeScope{StateDirs: StateDirsDir(getenv, root), ClaimsDir: ClaimsDir(getenv, root)}
}
