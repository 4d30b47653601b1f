package cli

import (
	"context"
)

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
