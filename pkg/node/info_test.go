package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
)

// TestNodeInfoServedNameOfActiveProfile: the node's served-name label is what the service
// step serves under the profile it runs (here the profile's --served-model-name), asked of
// the step, not read again from the step's own args.
func TestNodeInfoServedNameOfActiveProfile(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(path, []byte(`apiVersion: sglprov/v1
name: info
profiles:
  fast: {args: [--served-model-name, qwen-fast]}
  plain: {}
steps:
  - name: service
    systemd:
      unit: sglang-info.service
      manager: exec
      needs_commands: []
      model_path: /models/qwen
      profiles: [plain, fast]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"active": "fast"})
	st := &engine.State{Recipe: "info", Steps: map[string]*engine.StepRecord{"service": {Result: "ok", Data: data}}}
	if err := st.Save(state); err != nil {
		t.Fatal(err)
	}
	n := realRecipe(t, path, state, new([]string))
	r, err := n.Load()
	if err != nil {
		t.Fatal(err)
	}
	info := n.Info(context.Background(), r)
	if info.Unit != "sglang-info.service" || info.Profile != "fast" || info.Model != "/models/qwen" || info.ServedName != "qwen-fast" {
		t.Errorf("node info = %+v; want unit sglang-info.service, profile fast, model /models/qwen, served name qwen-fast", info)
	}
}
