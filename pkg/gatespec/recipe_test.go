package gatespec

import (
	"testing"

	"github.com/sglprov/sglprov/pkg/recipe"
)

func TestHeadURL(t *testing.T) {
	n := &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "fd00::1", HeadPort: 20000}
	for in, want := range map[string]string{"http://127.0.0.1:30000": "http://[fd00::1]:30000",
		"https://localhost/v1": "https://[fd00::1]:443/v1", "http://127.0.0.1": "http://[fd00::1]:80"} {
		if got, err := HeadURL(in, n); err != nil || got != want {
			t.Errorf("HeadURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	n.Rank = 0
	if got, _ := HeadURL("http://127.0.0.1:30000", n); got != "http://127.0.0.1:30000" {
		t.Errorf("the head asks %q", got)
	}
}
