package gatespec

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
)

// Overrides are what `sglprov smoke`'s flags change of a gate's spec (zero: keep the
// spec's), and where the spec came from.
type Overrides struct {
	// URL and Model replace the spec's when set.
	URL, Model string
	// MaxTokens, ReadyTimeout and RequestTimeout replace the spec's when positive;
	// negative ones are a usage error.
	MaxTokens                    int
	ReadyTimeout, RequestTimeout time.Duration
	// Builtin asks the built-in cases of every kind in place of the spec's.
	Builtin bool
	// RecipeFile is the recipe the spec was read from ("" for none): an accuracy case's
	// question file is named relative to its folder. Insecure accepts a question file that
	// other users own or can write.
	RecipeFile string
	Insecure   bool
	// Seed, when set, replays a run's fresh questions (in place of gate.SeedEnv's).
	Seed uint64
}

// GateConfig is the gate's config of spec with o's overrides; getenv reads the API key's
// variable.
func GateConfig(spec Spec, o Overrides, getenv func(string) string) (gate.Config, error) {
	if o.URL != "" {
		spec.URL = o.URL
	}
	if o.Model != "" {
		spec.Model = o.Model
	}
	if o.MaxTokens < 0 || o.ReadyTimeout < 0 || o.RequestTimeout < 0 {
		return gate.Config{}, fmt.Errorf("%w: --max-tokens, --ready-timeout and --request-timeout must not be negative", exitcode.ErrUsage)
	}
	if o.MaxTokens > 0 {
		spec.MaxTokens = o.MaxTokens
	}
	if o.ReadyTimeout > 0 {
		spec.ReadyTimeout = o.ReadyTimeout.String()
	}
	if o.RequestTimeout > 0 {
		spec.RequestTimeout = o.RequestTimeout.String()
	}
	if o.Builtin {
		spec.Cases = gate.BuiltinSet()
	}
	cfg, err := spec.Config(getenv)
	if err != nil {
		return cfg, err
	}
	if o.Seed != 0 {
		cfg.Seed = o.Seed
	}
	// An accuracy case's question file is named relative to the recipe's folder, and
	// refused when group or others can write it, as the recipe's other files are.
	cfg.ReadFile = func(name string) ([]byte, error) {
		if o.RecipeFile != "" && !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(o.RecipeFile), name)
		}
		if !o.Insecure {
			if err := engine.CheckPermissions(name); err != nil {
				return nil, err
			}
		}
		return engine.ReadTrusted(name, 0)
	}
	return cfg, nil
}
