package steps_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/steps/systemd"
)

// TestShippedRecipesSharingAUnitReplaceEachOther: shipped recipes (the demo's aside) that
// install the same unit serve the same model on the same hosts: each names the others in
// replaces:, so that applying one after another switches the node over instead of being
// refused for the GPUs the other's server claims.
func TestShippedRecipesSharingAUnitReplaceEachOther(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "recipes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	byUnit := map[string][]string{}
	replaces := map[string][]string{}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "demo") {
			continue
		}
		r := loadShipped(t, filepath.Base(f))
		replaces[r.Name] = r.Replaces
		for _, st := range r.Steps {
			if st.Kind != "systemd" {
				continue
			}
			var spec systemd.Spec
			if err := st.Body.Decode(&spec); err != nil {
				t.Fatalf("%s: step %s: %v", f, st.Name, err)
			}
			byUnit[spec.Unit] = append(byUnit[spec.Unit], r.Name)
		}
	}
	shared := 0
	for unit, names := range byUnit {
		for _, a := range names {
			for _, b := range names {
				if a == b {
					continue
				}
				shared++
				if !slices.Contains(replaces[a], b) {
					t.Errorf("recipes %s and %s both install %s, but %s does not name %s in replaces:", a, b, unit, a, b)
				}
			}
		}
	}
	if shared == 0 {
		t.Fatal("no two shipped recipes share a unit: the SM120 recipes were expected to")
	}
}
