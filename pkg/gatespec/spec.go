// Package gatespec is the smoke gate's configuration as a recipe states it: the smoke
// step's spec (Spec), what `sglprov smoke`'s flags change of it (Overrides, GateConfig),
// and the spec of a recipe's smoke step rendered for this host (RecipeSpec), a worker of
// a multi-node group asking its head (HeadURL).
package gatespec

import (
	"fmt"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
)

// Spec is the recipe body of a smoke step.
type Spec struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:30000".
	URL string `yaml:"url" json:"url"`
	// Model is the model name to send; empty asks /v1/models.
	Model string `yaml:"model" json:"model,omitempty"`
	// ReadyTimeout and RequestTimeout are durations such as "20m" and "2m".
	ReadyTimeout   string `yaml:"ready_timeout" json:"ready_timeout,omitempty"`
	RequestTimeout string `yaml:"request_timeout" json:"request_timeout,omitempty"`
	// CasesTimeout bounds all the cases of one gate run (one profile) together, after
	// readiness (default 10m): a server that never answers chat costs this once, not
	// request_timeout for every request.
	CasesTimeout string `yaml:"cases_timeout" json:"cases_timeout,omitempty"`
	// MaxTokens is each request's max_tokens (default 1024).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens,omitempty"`
	// ChatTemplateKwargs is sent with each request, e.g. {enable_thinking: false}.
	ChatTemplateKwargs map[string]any `yaml:"chat_template_kwargs" json:"chat_template_kwargs,omitempty"`
	// APIKeyEnv names an environment variable holding the server's API key (the key
	// itself never goes in a recipe).
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env,omitempty"`
	// Cases are the questions; the built-in set when empty. A case may send its prompt
	// many times at once (concurrency), offer tools (expect.tool_call), ask for the
	// reasoning split (expect.reasoning), or be an accuracy sweep (accuracy).
	Cases []gate.Case `yaml:"cases" json:"cases,omitempty"`
	// Performance sets speed floors, and how much slower than the generation it would
	// replace a candidate may be (default 3 times).
	Performance *PerfSpec `yaml:"performance" json:"performance,omitempty"`
}

// Config turns the spec into the gate's config. Invalid durations, URLs or cases are
// errors wrapping exitcode.ErrUsage. The API key is read from APIKeyEnv through getenv
// (nil: no key).
func (s Spec) Config(getenv func(string) string) (gate.Config, error) {
	// A model the recipe names must be one the server lists (the gate run of a service's
	// profile checks the unit's own served name and model path instead).
	cfg := gate.Config{URL: s.URL, Model: s.Model, ServedModel: s.Model, MaxTokens: s.MaxTokens,
		ChatTemplateKwargs: s.ChatTemplateKwargs, Cases: s.Cases}
	var err error
	if cfg.ReadyTimeout, err = duration("ready_timeout", s.ReadyTimeout); err != nil {
		return cfg, err
	}
	if cfg.RequestTimeout, err = duration("request_timeout", s.RequestTimeout); err != nil {
		return cfg, err
	}
	if cfg.CasesTimeout, err = duration("cases_timeout", s.CasesTimeout); err != nil {
		return cfg, err
	}
	if s.MaxTokens < 0 {
		return cfg, fmt.Errorf("max_tokens %d: %w", s.MaxTokens, exitcode.ErrUsage)
	}
	if s.APIKeyEnv != "" && getenv != nil {
		cfg.APIKey = getenv(s.APIKeyEnv)
	}
	if err := s.Performance.apply(&cfg); err != nil {
		return cfg, err
	}
	if cfg.Seed, err = seedOf(getenv); err != nil {
		return cfg, err
	}
	if cfg.URL == "" {
		return cfg, fmt.Errorf("url is required: %w", exitcode.ErrUsage)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", exitcode.ErrUsage, err)
	}
	return cfg, nil
}

func duration(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive duration such as \"20m\": %w", field, v, exitcode.ErrUsage)
	}
	return d, nil
}

// seedOf reads the replayed seed from the environment (gate.SeedEnv), 0 when unset.
func seedOf(getenv func(string) string) (uint64, error) {
	if getenv == nil {
		return 0, nil
	}
	v := getenv(gate.SeedEnv)
	if v == "" {
		return 0, nil
	}
	seed, err := gate.ParseSeed(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", gate.SeedEnv, err, exitcode.ErrUsage)
	}
	return seed, nil
}
