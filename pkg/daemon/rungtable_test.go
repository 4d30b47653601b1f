package daemon

import "testing"

// Every rung of the ladder has its function in the table, and the table holds no rung the
// ladder does not climb.
func TestEveryRungHasItsFunction(t *testing.T) {
	for _, r := range rungs {
		if rungTable[r] == nil {
			t.Errorf("rung %s has no function in rungTable", r)
		}
	}
	if len(rungTable) != len(rungs) {
		t.Errorf("rungTable holds %d rungs, the ladder climbs %d", len(rungTable), len(rungs))
	}
}
