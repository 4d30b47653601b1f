package reclaim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/reclaim"
)

// What another state dir's recipes use is kept by remove --weights, however the other
// state dir is known (the registry, or a GPU claim naming it); one whose records cannot
// be read keeps the folder too, saying why; a registered state dir that is gone names
// nothing, and the weights go.
func TestRemoveKeepsWhatOtherStateDirsUse(t *testing.T) {
	type other struct{ viaClaim, corrupt, gone, junk bool }
	for name, tc := range map[string]other{
		"registered":       {},
		"claimed":          {viaClaim: true},
		"unreadable":       {corrupt: true},
		"gone":             {gone: true},
		"registry of junk": {junk: true},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, false)
			w := n.weights("data/models/shared", "model.safetensors")
			n.save(map[string][]engine.Owned{"a": {w}})
			reg, claims := t.TempDir(), t.TempDir()
			otherDir := t.TempDir()
			seen := w
			seen.Files = nil // it verified a's files, wrote none
			f := &engine.StateFile{Recipes: map[string]*engine.State{"b": {Recipe: "b", Steps: map[string]*engine.StepRecord{}, Owns: []engine.Owned{seen}}}}
			if err := engine.SaveStates(otherDir, f); err != nil {
				t.Fatal(err)
			}
			if tc.corrupt {
				os.WriteFile(engine.StatePath(otherDir), []byte("{not json"), 0o600)
			}
			if tc.viaClaim {
				claim, _ := json.Marshal(map[string]any{"recipe": "b", "state_dir": otherDir, "gpus": []string{"GPU-0"}})
				os.WriteFile(filepath.Join(claims, "0123456789abcdef0123456789abcdef.json"), claim, 0o644)
			} else if err := engine.RegisterStateDir(reg, otherDir); err != nil {
				t.Fatal(err)
			}
			if tc.gone {
				os.RemoveAll(otherDir)
			}
			if tc.junk {
				for i := 0; i < 8200; i++ {
					os.WriteFile(filepath.Join(reg, fmt.Sprintf("junk-%05d", i)), nil, 0o644)
				}
			}
			var out bytes.Buffer
			err := reclaim.Remove(context.Background(), reclaim.RemoveOptions{StateDir: n.state, Recipe: "a", Weights: true, Out: &out,
				Node: reclaim.NodeScope{StateDirs: reg, ClaimsDir: claims}})
			if err != nil {
				t.Fatalf("remove: %v\n%s", err, out.String())
			}
			file := filepath.Join(w.Path, "model.safetensors")
			switch {
			case tc.gone:
				if exists(file) {
					t.Errorf("the weights stayed for a state dir that is gone:\n%s", out.String())
				}
			case tc.junk:
				if !exists(file) || !strings.Contains(out.String(), "what other state dirs on the node use cannot be read") || !strings.Contains(out.String(), "junk-") {
					t.Errorf("beside a registry of junk: kept=%v\n%s", exists(file), out.String())
				}
			case tc.corrupt:
				if !exists(file) || !strings.Contains(out.String(), "the records of state dir "+otherDir+" cannot be read") {
					t.Errorf("beside unreadable records: kept=%v\n%s", exists(file), out.String())
				}
			default:
				if !exists(file) || !strings.Contains(out.String(), "used by recipe b of state dir "+otherDir) {
					t.Errorf("kept=%v\n%s", exists(file), out.String())
				}
			}
			n.intact(name)
		})
	}
}
