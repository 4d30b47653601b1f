package daemon

import "testing"

// TestOneLineKeepsProblemsApart: a reason that lists one problem a line reads on /healthz's
// one line with the problems apart, not run together with spaces.
func TestOneLineKeepsProblemsApart(t *testing.T) {
	in := "host does not meet the recipe's requirements:\n  host has 1 GPU; this recipe needs at least 4\n  driver 570 does not satisfy >=580\n"
	want := "host does not meet the recipe's requirements: host has 1 GPU; this recipe needs at least 4; driver 570 does not satisfy >=580"
	if got := oneLine(in, "x"); got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
	if got := oneLine("  \n ", "none"); got != "none" {
		t.Errorf("oneLine of blanks = %q", got)
	}
	if got := oneLine("canary  failed:   garbage", "x"); got != "canary failed: garbage" {
		t.Errorf("oneLine = %q", got)
	}
}
