package gatespec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// TestGateConfigOverrides: the flags' values replace the spec's where set, negative ones
// are a usage error, and a question file is read relative to the recipe's folder.
func TestGateConfigOverrides(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "q.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := Spec{URL: "http://127.0.0.1:1", Model: "m", MaxTokens: 10}
	cfg, err := GateConfig(spec, Overrides{URL: "http://127.0.0.1:2", MaxTokens: 20, ReadyTimeout: time.Minute,
		RecipeFile: filepath.Join(dir, "r.yaml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL != "http://127.0.0.1:2" || cfg.Model != "m" || cfg.MaxTokens != 20 || cfg.ReadyTimeout != time.Minute {
		t.Errorf("config %+v: want the URL, max tokens and readiness of the overrides, the spec's model", cfg)
	}
	if b, err := cfg.ReadFile("q.jsonl"); err != nil || string(b) != "{}\n" {
		t.Errorf("ReadFile(q.jsonl) = %q, %v; want the file beside the recipe", b, err)
	}
	if _, err := GateConfig(spec, Overrides{RequestTimeout: -time.Second}, nil); !errors.Is(err, exitcode.ErrUsage) {
		t.Errorf("negative request timeout: %v, want a usage error", err)
	}
}
