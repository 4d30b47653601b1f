package reclaim_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/reclaim"
	"github.com/sglprov/sglprov/pkg/service"
)

// activeManager is the exec manager with every unit active, as a server that runs.
type activeManager struct{ service.Manager }

func (activeManager) State(context.Context, string) (string, string, error) {
	return "active", "running", nil
}

// gc stops no server: a unit its recipe no longer names that is still active stays, with
// its record, and gc says how to take it off; once it is inactive gc deletes it.
func TestGCLeavesAnOrphanedUnitThatRuns(t *testing.T) {
	n := newNode(t, false)
	unitFile := filepath.Join(n.state, "units", "old.service")
	os.MkdirAll(filepath.Dir(unitFile), 0o755)
	text := "# Managed by sglprov. Recipe: moved. Profile: . Fingerprint: f. Do not edit: changes are replaced on the next apply.\n[Service]\nExecStart=/bin/true\n"
	os.WriteFile(unitFile, []byte(text), 0o644)
	n.save(map[string][]engine.Owned{"moved": nil}, engine.Owned{Kind: engine.OwnedUnit, Path: "old.service", Manager: service.KindExec, Recipe: "moved"})
	gc := func(active bool) string {
		var out bytes.Buffer
		err := reclaim.GC(context.Background(), reclaim.GCOptions{StateDir: n.state, Out: &out, NewManager: func(ctx context.Context, kind string) (service.Manager, error) {
			m, err := service.New(ctx, service.Options{Kind: service.KindExec, StateDir: n.state})
			if active {
				return activeManager{m}, err
			}
			return m, err
		}})
		if err != nil {
			t.Fatalf("gc: %v\n%s", err, out.String())
		}
		return out.String()
	}
	out := gc(true)
	if b, _ := os.ReadFile(unitFile); string(b) != text || !strings.Contains(out, "is active: stop it") || len(n.states().Orphans) != 1 {
		t.Errorf("gc of an orphaned unit that runs: want it and its record kept, and said so:\n%s", out)
	}
	out = gc(false)
	if exists(unitFile) || len(n.states().Orphans) != 0 || !strings.Contains(out, "unit old.service that recipe moved no longer names: deleted") {
		t.Errorf("gc of the orphaned unit once it stopped: want it and its record gone:\n%s", out)
	}
	n.intact("an orphaned unit that runs")
}
