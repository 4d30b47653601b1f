// Package smoke is the smoke step kind: the correctness gate of a recipe. It runs on every
// apply; when it needs a service step (systemd), it drives that step's profile fallback:
// gate the active profile, activate the next candidate on failure, and restore the
// last-known-good unit when none passes.
package smoke

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/console"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/logval"
	gate "github.com/sglprov/sglprov/pkg/smoke"
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
}

// Config turns the spec into the gate's config. Invalid durations, URLs or cases are
// errors wrapping engine.ErrUsage. The API key is read from APIKeyEnv through getenv
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
		return cfg, fmt.Errorf("max_tokens %d: %w", s.MaxTokens, engine.ErrUsage)
	}
	if s.APIKeyEnv != "" && getenv != nil {
		cfg.APIKey = getenv(s.APIKeyEnv)
	}
	if cfg.URL == "" {
		return cfg, fmt.Errorf("url is required: %w", engine.ErrUsage)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", engine.ErrUsage, err)
	}
	return cfg, nil
}

func duration(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive duration such as \"20m\": %w", field, v, engine.ErrUsage)
	}
	return d, nil
}

// Kind returns the smoke step kind for the registry.
func Kind() engine.Kind {
	return engine.KindOf(New)
}

// Step is a smoke gate step.
type Step struct {
	name string
	spec Spec
	// getenv reads the API key's variable (os.Getenv outside tests).
	getenv func(string) string
}

// New builds a smoke step, checking the spec.
func New(name string, spec Spec) (*Step, error) {
	if _, err := spec.Config(nil); err != nil {
		return nil, err
	}
	return &Step{name: name, spec: spec, getenv: os.Getenv}, nil
}

// Gates reports true: a service step this step needs keeps its unit only once the gate
// passed (engine.Gate).
func (s *Step) Gates() bool { return true }

// AlwaysRun reports true: the gate runs on every apply.
func (s *Step) AlwaysRun() bool { return true }

// OfflineSkip is why the gate does nothing under --root: nothing was started.
func (s *Step) OfflineSkip() string {
	return "offline (--root): no server is started, the gate does not run"
}

// Fingerprint returns the spec; the gate runs every time anyway.
func (s *Step) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	b, err := json.Marshal(s.spec)
	if err != nil {
		return nil, fmt.Errorf("encoding smoke spec: %w", err)
	}
	return map[string]string{"spec": string(b)}, nil
}

// ReadFiles reads the question files of the accuracy cases (validate), as Run does.
func (s *Step) ReadFiles(env *engine.Env) error {
	for _, c := range s.spec.Cases {
		if c.Accuracy == nil {
			continue
		}
		if _, err := gate.LoadQuestions(c.Accuracy.Questions, func(name string) ([]byte, error) {
			b, _, err := env.ReadRecipeFile(name)
			return b, err
		}); err != nil {
			return fmt.Errorf("case %q: %w", c.Name, err)
		}
	}
	return nil
}

// Intact reports false: a gate has no outputs to keep; it always runs.
func (s *Step) Intact(context.Context, *engine.Env) (bool, string, error) {
	return false, "the smoke gate runs on every apply", nil
}

// ProfileResult is the gate's verdict on one candidate profile.
type ProfileResult struct {
	Profile string `json:"profile"`
	// Error is set when the profile could not be activated.
	Error  string       `json:"error,omitempty"`
	Result *gate.Result `json:"result,omitempty"`
}

func (p ProfileResult) summary() string {
	if p.Error != "" {
		return p.Error
	}
	return p.Result.Summary()
}

// Run gates the server. With a service step among its dependencies, it tries the
// service's candidate profiles in order until one passes.
func (s *Step) Run(ctx context.Context, env *engine.Env) error {
	cfg, err := s.spec.Config(s.getenv)
	if err != nil {
		return err
	}
	// An accuracy case's JSONL file is named like the recipe's other files: relative to
	// the recipe's folder, refused when group or others can write it.
	cfg.ReadFile = func(name string) ([]byte, error) {
		b, _, err := env.ReadRecipeFile(name)
		return b, err
	}
	if env.Offline {
		env.Detail("skipped", "offline: nothing was started")
		return engine.Skipped(s.OfflineSkip())
	}
	svc := serviceDep(env)
	if svc == nil {
		res, err := s.gate(ctx, env, cfg, "")
		if err != nil {
			return err
		}
		if !res.Pass {
			return fmt.Errorf("%w: %s", engine.ErrGate, res.Summary())
		}
		return nil
	}
	if worker, err := s.joinGroup(ctx, env, cfg, svc); worker || err != nil {
		return err
	}
	cfg.Failed = svc.Failed
	served, _ := svc.(servedModel)
	candidates := svc.Candidates(env)
	if len(candidates) == 0 {
		candidates = []string{""}
	}
	var tried []ProfileResult
	for _, p := range candidates {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("gating %s: %w", svc.ServiceName(), err)
		}
		pr := ProfileResult{Profile: p}
		if p != "" && svc.Active(env) != p {
			env.Log.Info("activating profile", "service", svc.ServiceName(), "profile", p)
			if err := svc.Activate(ctx, env, p); err != nil {
				pr.Error = fmt.Sprintf("activating profile %s: %v", p, err)
				env.Log.Warn("profile could not be activated", "profile", p, "err", err)
				tried = append(tried, pr)
				env.Detail("profiles", tried)
				continue
			}
		}
		pcfg := cfg
		if served != nil {
			// The server judged must be the unit's: the model it lists and loaded are the
			// unit's (another server on the port would pass the gate in its place).
			name, path, err := served.ServedModel(env)
			if err != nil {
				return fmt.Errorf("reading the model %s serves: %w", svc.ServiceName(), err)
			}
			pcfg.ServedModel, pcfg.ModelPath = name, path
		}
		res, err := s.gate(ctx, env, pcfg, p)
		if err != nil {
			return err
		}
		pr.Result = res
		tried = append(tried, pr)
		env.Detail("profiles", tried)
		if res.Pass {
			// Won also keeps the unit that passed (a staged unit becomes the persistent
			// one), with or without profiles.
			if err := svc.Won(ctx, env, p); err != nil {
				return fmt.Errorf("recording profile %q as the winner: %w", p, err)
			}
			if p != "" {
				env.Detail("profile", p)
			}
			return nil
		}
	}
	var parts []string
	for _, pr := range tried {
		name := pr.Profile
		if name == "" {
			name = svc.ServiceName()
		}
		parts = append(parts, fmt.Sprintf("%s: %s", name, pr.summary()))
	}
	msg := "no candidate profile passed the gate"
	if len(candidates) == 1 && candidates[0] == "" {
		msg = "the service failed the gate"
	}
	if g := env.Generation; g != nil && g.Serving != g.Key {
		msg = fmt.Sprintf("generation %s failed the gate (%s)", short(g.Key), msg)
	}
	restored, rerr := svc.RestoreLastKnownGood(ctx, env)
	switch {
	case rerr != nil:
		msg += fmt.Sprintf(" (restoring the last-known-good unit failed: %v)", rerr)
	case restored:
		what := "the last-known-good unit"
		if g := env.Generation; g != nil && g.Serving != "" && g.Serving != g.Key {
			what = fmt.Sprintf("the last-known-good unit of generation %s", short(g.Serving))
		}
		if r, ok := svc.(interface{ Restored() string }); ok && r.Restored() != "" {
			what = r.Restored() // a model switch: the units it replaced
		}
		env.Log.Warn("restored "+what, "service", svc.ServiceName())
		// What came back is gated again: the run says whether the node serves well now.
		again, gerr := s.gate(ctx, env, cfg, svc.Active(env))
		env.Detail("restored_gate", again)
		switch {
		case gerr != nil:
			msg += fmt.Sprintf("; %s was restored, and gating it again failed: %v", what, gerr)
		case again.Pass:
			msg += fmt.Sprintf("; %s was restored and passed the gate again", what)
		default:
			msg += fmt.Sprintf("; %s was restored and failed the gate too: %s", what, again.Summary())
		}
		env.Detail("restored_passed", gerr == nil && again.Pass)
	default:
		msg += "; there is no last-known-good unit to restore"
	}
	env.Detail("restored_last_known_good", restored)
	return fmt.Errorf("%w: %s: %s", engine.ErrGate, msg, strings.Join(parts, " | "))
}

// gate runs the gate once, logging its table and recording it in the report.
func (s *Step) gate(ctx context.Context, env *engine.Env, cfg gate.Config, profile string) (*gate.Result, error) {
	if profile != "" {
		env.Log.Info("smoke gate", "url", gate.RedactURL(cfg.URL), "profile", profile)
	} else {
		env.Log.Info("smoke gate", "url", gate.RedactURL(cfg.URL))
	}
	wait := newWaitReporter(env, cfg)
	cfg.Waiting = wait.Update
	res, err := gate.Run(ctx, cfg)
	wait.Stop()
	if err != nil {
		return nil, fmt.Errorf("running the smoke gate: %w: %w", engine.ErrUsage, err)
	}
	if err := ctx.Err(); err != nil && !res.Pass {
		return nil, fmt.Errorf("running the smoke gate: %w", err)
	}
	var tbl bytes.Buffer
	_ = gate.WriteTable(&tbl, res)
	if env.Out != nil {
		if profile != "" {
			fmt.Fprintf(env.Out, "profile %s\n", profile)
		}
		_, _ = env.Out.Write(tbl.Bytes())
	}
	env.Detail("smoke", res)
	var who []any // the profile gated, when a service's profile was
	if profile != "" {
		who = []any{"profile", profile}
	}
	if res.Pass {
		env.Log.Info("smoke gate passed", append(who, "model", res.Model,
			"ready_seconds", logval.Seconds(res.TimeToReady))...)
	} else {
		env.Log.Warn("smoke gate failed", append(who, "verdict", res.Summary())...)
		for _, c := range res.Cases {
			if !c.Pass {
				sample, _ := gate.SampleText(c.Sample)
				env.Log.Warn("case failed", "case", c.Name, "reason", c.Reason, "sample", sample)
			}
		}
	}
	return res, nil
}

// servedModel is a service step that knows the model its server serves: the name
// /v1/models lists and the path SGLang's /get_model_info reports.
type servedModel interface {
	ServedModel(env *engine.Env) (name, path string, err error)
}

// short shortens a generation key for messages.
func short(key string) string {
	if len(key) > 12 {
		return key[:12]
	}
	return key
}

// serviceDep returns the first dependency (by name) that is a service step, or nil.
func serviceDep(env *engine.Env) engine.ServiceStep {
	names := make([]string, 0, len(env.Deps))
	for n := range env.Deps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if svc, ok := env.Deps[n].(engine.ServiceStep); ok {
			return svc
		}
	}
	return nil
}

// newWaitReporter reports the readiness wait: a live line on a terminal, else a log line
// at least every 30 s.
func newWaitReporter(env *engine.Env, cfg gate.Config) *gate.WaitReporter {
	label := gate.RedactURL(cfg.URL)
	if env.IsTerminal && env.Console != nil {
		return gate.NewWaitReporter(label, console.StatusLineOf(env.Console), nil, 0)
	}
	return gate.NewWaitReporter(label, nil, func(_ string, s gate.WaitStatus) {
		env.Log.Info("waiting for the server", "url", label, "seconds", logval.Seconds(s.Elapsed),
			"timeout_seconds", logval.Seconds(s.Timeout), "last", s.Last)
	}, 0)
}
