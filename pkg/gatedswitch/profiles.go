package gatedswitch

import (
	"encoding/json"
	"fmt"

	"github.com/sglprov/sglprov/pkg/gate"
)

// Report detail keys of a gate that switched the service between profiles: the candidates
// it tried, in order (ProfileResult each), and the one that passed.
const (
	DetailProfiles = "profiles"
	DetailProfile  = "profile"
)

// ProfilesOf reads a gate's switch of profiles from a step's report details, as a run
// records them in process or as report.json gives them back: the profiles it tried, in
// order, and the one that passed ("" when none did). ok is false when the details hold no
// tried profile (not a gate's, or a gate that switched nothing).
func ProfilesOf(details map[string]any) (tried []string, won string, ok bool) {
	raw, found := details[DetailProfiles]
	if !found {
		return nil, "", false
	}
	var results []ProfileResult
	switch v := raw.(type) {
	case []ProfileResult:
		results = v
	default:
		b, err := json.Marshal(v)
		if err != nil || json.Unmarshal(b, &results) != nil {
			return nil, "", false
		}
	}
	if len(results) == 0 {
		return nil, "", false
	}
	for _, r := range results {
		tried = append(tried, r.Profile)
	}
	won, _ = details[DetailProfile].(string)
	return tried, won, true
}

// ProfileResult is the gate's verdict on one candidate profile.
type ProfileResult struct {
	Profile string `json:"profile"`
	// Error is set when the profile could not be activated.
	Error  string       `json:"error,omitempty"`
	Result *gate.Result `json:"result,omitempty"`
	// StagePort is the side port the profile was gated on (Result) before it served; 0
	// when it was gated on the served port.
	StagePort int `json:"stage_port,omitempty"`
	// Served is the gate on the served port, after a pass on StagePort.
	Served *gate.Result `json:"served,omitempty"`
}

// Summary says in one line how the profile fared: its gate, or why it could not be
// activated.
func (p ProfileResult) Summary() string {
	switch {
	case p.Served != nil:
		return fmt.Sprintf("passed on port %d, then on the served port: %s", p.StagePort, p.Served.Summary())
	case p.Error != "":
		return p.Error
	}
	return p.Result.Summary()
}
