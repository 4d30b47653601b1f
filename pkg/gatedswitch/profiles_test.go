package gatedswitch

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestProfilesOf: the gate's switch of profiles reads the same from a run's own details
// and from report.json's; details without tried profiles are not a gate's switch.
func TestProfilesOf(t *testing.T) {
	own := map[string]any{DetailProfiles: []ProfileResult{{Profile: "plain", Error: "bad"}, {Profile: "fast"}}, DetailProfile: "fast"}
	b, err := json.Marshal(own)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]map[string]any{"in process": own, "report.json": decoded} {
		tried, won, ok := ProfilesOf(d)
		if !ok || won != "fast" || !slices.Equal(tried, []string{"plain", "fast"}) {
			t.Errorf("%s: ProfilesOf = %v, %q, %v; want [plain fast], fast", name, tried, won, ok)
		}
	}
	for _, d := range []map[string]any{nil, {"profile": "fast"}, {DetailProfiles: []any{}}, {DetailProfiles: "x"}} {
		if tried, won, ok := ProfilesOf(d); ok {
			t.Errorf("ProfilesOf(%v) = %v, %q, true; want not a switch", d, tried, won)
		}
	}
}
