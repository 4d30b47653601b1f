package gpu

import (
	"regexp"

	"github.com/sglprov/sglprov/pkg/recipe"
)

// StandIn returns the GPU facts of a host that meets req as far as it says: its compute
// capability when it names one (the lowest of a range), its count and memory per GPU; one
// GPU of compute capability 9.0 and 80 GiB where it says nothing. validate renders the
// steps' templates with them on a machine without GPU facts, so that every step is built.
func StandIn(req recipe.Requirements) *Facts {
	cc := "9.0"
	if m := ccRE.FindStringSubmatch(req.GPU.ComputeCapability); m != nil {
		cc = m[1]
	}
	count := max(req.GPU.MinCount, 1)
	if len(req.GPU.Counts) > 0 {
		count = max(req.GPU.Counts[0], 1)
	}
	mem := req.GPU.MinMemoryGiB
	if mem <= 0 {
		mem = 80
	}
	f := &Facts{DriverVersion: "0", Source: "stand-in"}
	for i := range count {
		f.GPUs = append(f.GPUs, Device{Index: i, Name: "stand-in GPU", ComputeCapability: cc,
			MemoryTotalBytes: uint64(mem * (1 << 30))})
	}
	return f
}

// ccRE finds the first compute capability of a range such as "12.0" or ">=9.0,<10.0".
var ccRE = regexp.MustCompile(`(\d+\.\d+)`)
