// Package nccl derives the NCCL environment of a multi-GPU server from what is known about
// the host's peer-to-peer paths. By default it sets nothing and lets NCCL choose: NCCL
// detects the PCIe and NVLink topology itself, and a forced level (NCCL_P2P_LEVEL=SYS) sends
// peer traffic across the CPU interconnect of a two-socket host, or hangs NCCL at start
// where ACS or an IOMMU redirects peer transactions. Only where the host's facts say peer
// paths are blocked does it turn peer-to-peer off (NCCL_P2P_DISABLE=1), with the reason.
//
// The facts come through Source, which the host-fitness checks implement; with none, NCCL
// decides and Derive says so. The package imports nothing of sglprov's.
package nccl

import (
	"fmt"
	"sort"
	"strings"
)

// PeerPath is what is known about GPU peer-to-peer on a host.
type PeerPath int

// What a host's facts can say about its GPU peer paths.
const (
	// Unknown: nothing was measured (the default).
	Unknown PeerPath = iota
	// Works: every GPU pair has a working peer path.
	Works
	// Blocked: some GPU pair has no usable peer path (ACS redirection, an IOMMU in
	// translation mode, peer access refused by the driver).
	Blocked
)

// String names the state for messages.
func (p PeerPath) String() string {
	switch p {
	case Works:
		return "works"
	case Blocked:
		return "blocked"
	}
	return "unknown"
}

// Facts are a host's peer-path facts.
type Facts struct {
	// PeerPath is what is known about peer-to-peer between the GPUs.
	PeerPath PeerPath
	// Detail says what the facts rest on, e.g. "ACS enabled on bridge 0000:16:02.0 above
	// GPU 2"; it goes into the reason plan shows.
	Detail string
}

// Source gives a host's peer-path facts; ok is false when it has none.
type Source interface {
	PeerPathFacts() (f Facts, ok bool)
}

// Variables this package decides; a recipe that sets one of them itself wins.
var decided = []string{"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"}

// Decision is the derived environment and why.
type Decision struct {
	// Env holds the variables to add to the server's environment (empty when NCCL decides).
	Env map[string]string
	// Reasons say, for plan, what was set or left to NCCL and why.
	Reasons []string
}

// Derive returns the NCCL environment for a server whose own environment (the recipe's
// step and profile) is set, from src (nil: no facts). Variables set holds are kept and
// named as the recipe's choice; otherwise NCCL_P2P_DISABLE=1 only where the facts say peer
// paths are blocked, and nothing where they work or are unknown.
func Derive(src Source, set map[string]string) Decision {
	d := Decision{Env: map[string]string{}}
	var own []string
	for _, k := range decided {
		if v, ok := set[k]; ok {
			own = append(own, k+"="+v)
		}
	}
	if len(own) > 0 {
		sort.Strings(own)
		d.Reasons = append(d.Reasons, strings.Join(own, ", ")+": set by the recipe, kept as it is")
		return d
	}
	var f Facts
	ok := false
	if src != nil {
		f, ok = src.PeerPathFacts()
	}
	detail := ""
	if f.Detail != "" {
		detail = " (" + f.Detail + ")"
	}
	switch {
	case !ok || f.PeerPath == Unknown:
		d.Reasons = append(d.Reasons, "no NCCL_P2P_* set: NCCL chooses the peer-to-peer path from its own topology detection; "+
			"this host has no peer-path facts")
	case f.PeerPath == Blocked:
		d.Env["NCCL_P2P_DISABLE"] = "1"
		d.Reasons = append(d.Reasons, fmt.Sprintf("NCCL_P2P_DISABLE=1: GPU peer-to-peer is blocked on this host%s; "+
			"NCCL would hang at start trying it", detail))
	default:
		d.Reasons = append(d.Reasons, fmt.Sprintf("no NCCL_P2P_* set: GPU peer-to-peer works on this host%s; NCCL chooses the level", detail))
	}
	return d
}
