package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

// TestNodeInfoSGLangCommit: node_info's SGLang commit is the one the first source step
// whose URL names sglang pins, asked of the built steps (engine.SourcePinner): its ref, or
// the URL's ?ref=; another project's source is not it.
func TestNodeInfoSGLangCommit(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	for name, src := range map[string]string{
		"ref":     `{url: "git::https://github.com/sgl-project/sglang", ref: "` + commit + `", dest: /opt/s}`,
		"url ref": `{url: "git::https://github.com/sgl-project/sglang?ref=` + commit + `", dest: /opt/s}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			path := filepath.Join(dir, "r.yaml")
			text := "apiVersion: sglprov/v1\nname: src\nsteps:\n" +
				"  - name: other\n    source: {url: \"git::https://github.com/flashinfer-ai/flashinfer?ref=" + strings.Repeat("f", 40) + "\", dest: /opt/f}\n" +
				"  - name: sglang\n    source: " + src + "\n"
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			n := realRecipe(t, path, state, new([]string))
			r, err := n.Load()
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Info(context.Background(), r).SGLangCommit; got != commit {
				t.Errorf("SGLang commit %q, want %s", got, commit)
			}
		})
	}
}
