package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
)

// A step that failed before it installed anything owns nothing: a unit named by a service
// step that failed is not recorded, so a remove never stops or deletes it; once the step
// succeeded its unit is recorded, and stays recorded when a later run of it fails.
func TestOwnedOnlyOnceTheStepSucceeded(t *testing.T) {
	w := newWorld()
	dir := t.TempDir()
	text := func(fail bool) string {
		return fmt.Sprintf("apiVersion: sglprov/v1\nname: svc\nsteps:\n  - name: service\n    fake: {unit: ssh.service, fail: %v}\n", fail)
	}
	units := func() []string {
		st, err := engine.LoadRecipeState(dir, "svc")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range st.Owns {
			if o.Kind == engine.OwnedUnit {
				out = append(out, o.Path)
			}
		}
		return out
	}
	e := newEngine(t, w, load(t, w, text(true)), dir, nil)
	if _, err := e.Apply(context.Background()); err == nil {
		t.Fatal("the failing step passed")
	}
	if got := units(); len(got) != 0 {
		t.Errorf("a step that failed owns %v", got)
	}
	e = newEngine(t, w, load(t, w, text(false)), dir, nil)
	if _, err := e.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.broken["service"] = true
	e = newEngine(t, w, load(t, w, text(true)), dir, nil)
	_, _ = e.Apply(context.Background())
	if got := units(); strings.Join(got, ",") != "ssh.service" {
		t.Errorf("after a success and a failure the step owns %v, want ssh.service", got)
	}
}
