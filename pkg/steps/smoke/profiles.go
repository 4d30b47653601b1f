package smoke

import (
	"encoding/json"
	"fmt"
	"strings"
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

// fallbackNote is the summary's note of a gate that fell back from the profiles it tried
// first to won: "profile A failed the gate; B serves" ("" when the first one won).
func fallbackNote(tried []ProfileResult, won string) string {
	var failed []string
	for _, t := range tried {
		if t.Profile != "" && t.Profile != won {
			failed = append(failed, t.Profile)
		}
	}
	if len(failed) == 0 || won == "" {
		return ""
	}
	word := "profile"
	if len(failed) > 1 {
		word = "profiles"
	}
	return fmt.Sprintf("%s %s failed the gate; %s serves", word, strings.Join(failed, ", "), won)
}
