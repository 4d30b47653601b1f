// Package smoke is the smoke step kind: the correctness gate of a recipe. It runs on every
// apply; when it needs a service step (systemd), it drives that step's profile fallback:
// gate the active profile, activate the next candidate on failure, and restore the
// last-known-good unit when none passes.
package smoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/console"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/logval"
	gate "github.com/sglprov/sglprov/pkg/smoke"
	"github.com/sglprov/sglprov/pkg/switchover"
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
	for i, c := range s.spec.Cases {
		if c.Accuracy == nil {
			continue
		}
		if _, err := gate.LoadQuestions(c.Accuracy.Questions, func(name string) ([]byte, error) {
			b, _, err := env.ReadRecipeFile(name)
			return b, err
		}); err != nil {
			if !errors.Is(err, exitcode.ErrUsage) {
				// A questions file that is not a questions file is the recipe's error.
				err = fmt.Errorf("%w: %w", exitcode.ErrUsage, err)
			}
			return engine.AtField(fmt.Sprintf("cases[%d].accuracy.questions", i), fmt.Errorf("case %q: %w", c.Name, err))
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
	// StagePort is the side port the profile was gated on (Result) before it served; 0
	// when it was gated on the served port.
	StagePort int `json:"stage_port,omitempty"`
	// Served is the gate on the served port, after a pass on StagePort.
	Served *gate.Result `json:"served,omitempty"`
}

func (p ProfileResult) summary() string {
	switch {
	case p.Served != nil:
		return fmt.Sprintf("passed on port %d, then on the served port: %s", p.StagePort, p.Served.Summary())
	case p.Error != "":
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
			return fmt.Errorf("%w: %s", exitcode.ErrGate, res.Summary())
		}
		return nil
	}
	candidates := svc.Candidates(env)
	if len(candidates) == 0 {
		candidates = []string{""}
	}
	// A candidate of a switch is compared with the figures the serving generation's gate
	// last measured.
	if g := env.Generation; g != nil && g.Serving != "" && g.Serving != g.Key {
		base, err := ServingPerf(env, g.Serving)
		if err != nil {
			env.Log.Warn("the serving generation's speed is not compared", "error", err)
		}
		cfg.Baseline = base
	}
	run := func(ctx context.Context, cfg gate.Config, profile string) (*gate.Result, error) {
		return s.gate(ctx, env, s.spec.Performance.profileFloors(cfg, profile), profile)
	}
	// A worker of a multi-node group runs the profile its head runs when the head serves
	// and says so, else the group's first candidate (the head chooses no other), and is
	// judged through the head.
	worker := s.workerGate(env, svc)
	if worker != nil {
		candidates = headCandidate(ctx, env, cfg.URL, candidates)
	}
	res, results, err := RunSwitch(ctx, env, svc, candidates, SwitchGate{Config: cfg,
		Drain: env.Drain, Undrain: env.Undrain, Run: run, RunServer: worker, Await: awaitHead(env, time.Second)})
	if res == nil {
		return err
	}
	var tried []ProfileResult
	gated := 0 // the gate's results consumed by the candidates
	for _, a := range res.Tried {
		pr := ProfileResult{Profile: a.Server.Profile, Error: a.Error, StagePort: a.StagePort}
		if a.Verdict != nil && gated < len(results) {
			pr.Result = results[gated]
			gated++
		}
		if a.Served != nil && gated < len(results) {
			pr.Served = results[gated]
			gated++
		}
		tried = append(tried, pr)
	}
	env.Detail(DetailProfiles, tried)
	if err == nil && env.Generation != nil {
		for i := len(results) - 1; i >= 0; i-- {
			if results[i] != nil && results[i].Pass {
				if rerr := RecordPerf(env, env.Generation.Key, results[i]); rerr != nil {
					env.Log.Warn("the gate's speed figures were not recorded", "error", rerr)
				}
				break
			}
		}
	}
	if err == nil {
		if res.WinnerProfile != "" {
			env.Detail(DetailProfile, res.WinnerProfile)
		}
		if note := fallbackNote(tried, res.WinnerProfile); note != "" {
			env.Detail(engine.NoteDetail, note)
		}
		return nil
	}
	var fe *switchover.FailedError
	if !errors.As(err, &fe) {
		return err
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
		msg = fmt.Sprintf("generation %s failed the gate (%s)", generation.Short(g.Key), msg)
	}
	if fe.Why != nil {
		msg += fmt.Sprintf(" (%v)", fe.Why)
	}
	msg += "; " + restoredSentence(env, res)
	if res.Restored {
		env.Detail("restored_gate", results[gated:])
	}
	env.Detail("restored_last_known_good", res.Restored)
	env.Detail("restored_passed", res.Serving())
	return &gateFailed{msg: fmt.Sprintf("%s: %s", msg, strings.Join(parts, " | ")), failed: fe}
}

// gateFailed is a switch whose candidates all failed: exit 3 (exitcode.ErrGate), and the
// switch's result for a caller that asks whether what was restored serves.
type gateFailed struct {
	msg    string
	failed *switchover.FailedError
}

func (e *gateFailed) Error() string   { return e.msg }
func (e *gateFailed) Unwrap() []error { return []error{exitcode.ErrGate, e.failed} }

// restoredSentence says what came back after no candidate passed, naming the generation
// or the replaced units, and whether it passed the gate again.
func restoredSentence(env *engine.Env, res *switchover.Result) string {
	if len(res.Previous) == 0 {
		if res.RestoreErr != nil {
			return fmt.Sprintf("stopping the candidate failed: %v", res.RestoreErr)
		}
		return "there is no last-known-good unit to restore"
	}
	what := "the last-known-good unit"
	if g := env.Generation; g != nil && g.Serving != "" && g.Serving != g.Key {
		what = fmt.Sprintf("the last-known-good unit of generation %s", generation.Short(g.Serving))
	} else if g != nil && g.InPlaceServes {
		what = "the last-known-good unit of the in-place tree"
	}
	if res.Replaced {
		var units []string
		for _, p := range res.Previous {
			units = append(units, p.Unit)
		}
		what = "what it replaced (" + strings.Join(units, ", ") + ")"
	}
	switch {
	case !res.Restored && res.RestoreErr == nil:
		return what + " was left as it was (no candidate started)"
	case res.RestoreErr != nil:
		return fmt.Sprintf("restoring %s failed: %v", what, res.RestoreErr)
	case res.RestoredVerdict == nil:
		return what + " was restored and could not be gated again"
	case res.RestoredVerdict.Pass:
		return what + " was restored and passed the gate again"
	}
	return fmt.Sprintf("%s was restored and failed the gate too: %s", what, res.RestoredVerdict.Summary)
}

// SwitchGate is the gate a switch runs on each candidate and on what it restores.
type SwitchGate struct {
	// Config is the recipe's gate; ServedModel, ModelPath and Failed are set for each
	// server from its own unit.
	Config gate.Config
	// Run runs one gate (nil: gate.Run); profile names the candidate ("" for what is
	// restored or a service without profiles).
	Run func(ctx context.Context, cfg gate.Config, profile string) (*gate.Result, error)
	// RunServer, when set, runs each gate in place of Run, given the server judged (its
	// unit's own arguments): a worker of a multi-node group (WorkerGate).
	RunServer func(ctx context.Context, cfg gate.Config, srv switchover.Server) (*gate.Result, error)
	// Await, when set, is the switch's wait before a candidate that changes what runs
	// starts (switchover.Switch.Await), given the recipe's gate at the candidate's port: a
	// worker of a multi-node group waits until its head runs the candidate (awaitHead).
	Await func(ctx context.Context, cfg gate.Config, srv switchover.Server) error
	// Drain and Undrain are the recipe's hooks (nil: none).
	Drain, Undrain switchover.Hook
}

// RunSwitch switches svc to profiles through its switch transaction: each candidate, and
// what comes back when none passes, is gated against its own server (the served model
// name and model path of its own unit; its own unit's failure ends the readiness wait).
// The result is recorded in the service step (Switched) and, when a candidate was
// promoted, env's generation is recorded as serving (Env.Promoted). It returns the result, the
// gate's results in the order they ran, and nil or the switch's error (a
// *switchover.FailedError when no candidate passed).
func RunSwitch(ctx context.Context, env *engine.Env, svc engine.ServiceStep, profiles []string, g SwitchGate) (*switchover.Result, []*gate.Result, error) {
	sw, err := svc.Switch(ctx, env, profiles)
	if err != nil {
		return nil, nil, fmt.Errorf("preparing the switch of %s: %w", svc.ServiceName(), err)
	}
	run := g.Run
	if run == nil {
		run = func(ctx context.Context, cfg gate.Config, _ string) (*gate.Result, error) { return gate.Run(ctx, cfg) }
	}
	var results []*gate.Result
	sw.Gate = func(ctx context.Context, srv switchover.Server) (switchover.Verdict, error) {
		cfg := g.Config
		// The server judged must be the unit's: the model it lists and loaded are the
		// unit's (another server on the port would pass the gate in its place).
		cfg.ServedModel, cfg.ModelPath = srv.ServedModel, srv.ModelPath
		// It is reached where its unit listens (a replaced recipe's unit may use another
		// port than this recipe's URL names).
		cfg.URL = ServerURL(cfg.URL, srv)
		// Its own unit's failure ends the readiness wait.
		cfg.Failed = svc.Failed
		if unit := srv.Unit; unit != svc.ServiceName() {
			cfg.Failed = func(ctx context.Context) (bool, string, error) { return sw.Manager.Failed(ctx, unit) }
		}
		var res *gate.Result
		var err error
		if g.RunServer != nil {
			res, err = g.RunServer(ctx, cfg, srv)
		} else {
			res, err = run(ctx, cfg, srv.Profile)
		}
		if err != nil {
			return switchover.Verdict{}, err
		}
		results = append(results, res)
		return switchover.Verdict{Pass: res.Pass, Summary: res.Summary()}, nil
	}
	sw.Drain, sw.Undrain = g.Drain, g.Undrain
	if g.Await != nil {
		sw.Await = func(ctx context.Context, srv switchover.Server) error {
			cfg := g.Config
			cfg.URL = ServerURL(cfg.URL, srv)
			return g.Await(ctx, cfg, srv)
		}
	}
	// The promoted unit runs from env's generation: it is recorded as serving the moment
	// the unit in /etc changes, before the undrain hook or any cleanup, so that no prune
	// removes it whatever happens next (a kill -9 in the undrain hook, a failed later step).
	sw.Promoted = func(context.Context, switchover.Server) error { return env.Promoted() }
	res, err := sw.Run(ctx)
	if res != nil {
		if rerr := svc.Switched(ctx, env, res); rerr != nil && err == nil {
			err = fmt.Errorf("recording the switch of %s: %w", svc.ServiceName(), rerr)
		}
	}
	return res, results, err
}

// ServerURL is base (the recipe's gate URL) with its host and port replaced by where srv
// listens (its unit's --host and --port); a wildcard host (0.0.0.0, ::) is reached on the
// loopback address of its family. The scheme, credentials and path of base stay; base is
// returned as it is when it does not parse or srv's unit names neither (Listens unset).
func ServerURL(base string, srv switchover.Server) string {
	u, err := url.Parse(base)
	if err != nil || !srv.Listens || srv.Port <= 0 {
		return base
	}
	host := strings.TrimSuffix(strings.TrimPrefix(srv.Host, "["), "]")
	switch host {
	case "":
		host = u.Hostname()
	case "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	u.Host = net.JoinHostPort(host, strconv.Itoa(srv.Port))
	return u.String()
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
		return nil, fmt.Errorf("running the smoke gate: %w: %w", exitcode.ErrUsage, err)
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
	env.Detail(gate.DetailKey, res)
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

// OwnServer returns cfg set to judge svc's own server as it runs (the daemon's whole-gate
// rung): its served model name and model path, reached where its unit listens (an
// engine.ServerReader; else the names under the active profile, at the recipe's URL),
// and its unit's failure ending the readiness wait.
func OwnServer(ctx context.Context, env *engine.Env, svc engine.ServiceStep, cfg gate.Config) (gate.Config, error) {
	cfg.Failed = svc.Failed
	if sr, ok := svc.(engine.ServerReader); ok {
		srv, err := sr.Serving(ctx, env)
		if err != nil {
			return cfg, fmt.Errorf("reading the server %s runs: %w", svc.ServiceName(), err)
		}
		cfg.ServedModel, cfg.ModelPath = srv.ServedModel, srv.ModelPath
		cfg.URL = ServerURL(cfg.URL, srv)
		return cfg, nil
	}
	if sm, ok := svc.(engine.ModelServer); ok {
		name, path, err := sm.ServedModel(env)
		if err != nil {
			return cfg, fmt.Errorf("reading the model %s serves: %w", svc.ServiceName(), err)
		}
		cfg.ServedModel, cfg.ModelPath = name, path
	}
	return cfg, nil
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
