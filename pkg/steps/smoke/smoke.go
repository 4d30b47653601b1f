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
	"os"
	"sort"

	"github.com/sglprov/sglprov/pkg/console"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gatespec"
	"github.com/sglprov/sglprov/pkg/logval"
)

// Spec is the recipe body of a smoke step: the gate's configuration as the recipe
// states it (gatespec.Spec).
type Spec = gatespec.Spec

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

// Run gates the server. With a service step among its dependencies, it tries the
// service's candidate profiles in order until one passes (runSwitch).
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
	if svc != nil {
		return s.runSwitch(ctx, env, svc, cfg)
	}
	res, err := s.gate(ctx, env, cfg, "")
	if err != nil {
		return err
	}
	if !res.Pass {
		return fmt.Errorf("%w: %s", exitcode.ErrGate, res.Summary())
	}
	return nil
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
