package recipe

import (
	"fmt"
	"strings"
)

// Unchecked names what validate leaves to plan because it needs the host: the
// requirements, the required commands and, when the steps were built with a stand-in
// host's facts (standIn says why there are no real ones), the facts each step uses.
func (r *Recipe) Unchecked(standIn string) []string {
	var host []string
	if r.RequiresSet {
		host = append(host, "requires (the GPUs, driver and CUDA)")
	}
	if names := r.Commands.Names(); len(names) > 0 {
		host = append(host, "requires.commands ("+strings.Join(names, ", ")+")")
	}
	for _, p := range r.Profiles {
		if p.Match.ComputeCapability != "" {
			host = append(host, "which profile matches the GPUs")
			break
		}
	}
	var out []string
	if len(host) > 0 {
		out = append(out, "unchecked, needs the host (plan checks it): "+strings.Join(host, "; "))
	}
	if standIn == "" {
		return out
	}
	var uses []string
	for _, s := range r.Steps {
		var fs []string
		for _, ref := range r.ExpandRefs(s) {
			// The generation's folder is no host fact: it comes from the recipe's text.
			if !strings.HasPrefix(ref, "vars.") && ref != GenerationDirRef {
				fs = append(fs, ref)
			}
		}
		if len(fs) > 0 {
			uses = append(uses, fmt.Sprintf("step %s (%s)", s.Name, strings.Join(fs, ", ")))
		}
	}
	if len(uses) > 0 {
		out = append(out, "unchecked, rendered with a stand-in GPU ("+standIn+"): "+strings.Join(uses, "; "))
	}
	return out
}
