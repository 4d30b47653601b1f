package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
)

// A run registers its state dir node-wide before any step runs: a run whose first step
// fails (killed, or failed) leaves the registry naming the state dir, so another state
// dir's remove already sees what it may have written.
func TestApplyRegistersTheStateDirFirst(t *testing.T) {
	w := newWorld()
	reg := t.TempDir()
	dir := t.TempDir()
	failing := load(t, w, strings.Replace(fmt.Sprintf(serverRecipe, "model-x", "", "model-x"), "fake: {", "fake: {fail: true, ", 1))
	if _, err := newEngine(t, w, failing, dir, func(o *engine.Options) { o.StateDirsDir = reg }).Apply(context.Background()); err == nil {
		t.Fatal("the failing recipe passed")
	}
	entries, _ := filepath.Glob(filepath.Join(reg, "*.json"))
	if len(entries) != 1 {
		t.Fatalf("registry entries: %v", entries)
	}
	b, _ := os.ReadFile(entries[0])
	var e struct {
		StateDir string `json:"state_dir"`
	}
	if json.Unmarshal(b, &e) != nil || e.StateDir != dir {
		t.Errorf("the entry %s names %q, want %q", entries[0], b, dir)
	}
}
