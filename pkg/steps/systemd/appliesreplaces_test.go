package systemd

import (
	"testing"

	"github.com/sglprov/sglprov/pkg/service"
)

// replaces: is carried out only by the systemd manager on the live host: the exec manager
// and --root (offline) leave the replaced recipes' servers running.
func TestAppliesReplacesOnlyUnderSystemd(t *testing.T) {
	for _, tt := range []struct {
		manager string
		root    string
		want    bool
	}{
		{"", "", true},
		{service.KindSystemd, "/", true},
		{service.KindExec, "", false},
		{"", "/srv/node", false},
	} {
		env := testEnv(t, "")
		env.Replaces = []string{"model-a"}
		env.Root = tt.root
		env.Offline = tt.root != "" && tt.root != "/"
		spec := qwenSpec()
		spec.Manager = tt.manager
		if got := newStep(t, spec).AppliesReplaces(env); got != tt.want {
			t.Errorf("manager %q, root %q: AppliesReplaces = %v, want %v", tt.manager, tt.root, got, tt.want)
		}
	}
	env := testEnv(t, "")
	if newStep(t, qwenSpec()).AppliesReplaces(env) {
		t.Error("a recipe that replaces nothing applies replaces:")
	}
}
