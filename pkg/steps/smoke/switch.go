package smoke

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gatedswitch"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// runSwitch tries svc's candidate profiles in order until one passes the gate
// (gatedswitch.RunSwitch), records the profiles tried and the winner's speed figures,
// and, when none passed, fails naming each and what came back.
func (s *Step) runSwitch(ctx context.Context, env *engine.Env, svc engine.ServiceStep, cfg gate.Config) error {
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
		return s.gate(ctx, env, s.spec.Performance.ProfileFloors(cfg, profile), profile)
	}
	// A worker of a multi-node group runs the profile its head runs when the head serves
	// and says so, else the group's first candidate (the head chooses no other), and is
	// judged through the head.
	worker := s.workerGate(env, svc)
	if worker != nil {
		candidates = gatedswitch.HeadCandidate(ctx, env, cfg.URL, candidates)
	}
	res, results, err := gatedswitch.RunSwitch(ctx, env, svc, candidates, gatedswitch.SwitchGate{Config: cfg,
		Drain: env.Drain, Undrain: env.Undrain, Run: run, RunServer: worker, Await: gatedswitch.AwaitHead(env, time.Second)})
	if res == nil {
		return err
	}
	tried, gated := profileResults(res, results)
	env.Detail(gatedswitch.DetailProfiles, tried)
	if err == nil {
		recordPassed(env, results)
		if res.WinnerProfile != "" {
			env.Detail(gatedswitch.DetailProfile, res.WinnerProfile)
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
	return switchFailed(env, svc, candidates, tried, res, results[gated:], fe)
}

// profileResults pairs the switch's candidates with the gate's results, in the order they
// ran; gated is how many of results the candidates consumed (the rest judged what was
// restored).
func profileResults(res *switchover.Result, results []*gate.Result) (tried []gatedswitch.ProfileResult, gated int) {
	for _, a := range res.Tried {
		pr := gatedswitch.ProfileResult{Profile: a.Server.Profile, Error: a.Error, StagePort: a.StagePort}
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
	return tried, gated
}

// recordPassed keeps the figures of the last passing gate as env's generation's (nothing
// without a generation).
func recordPassed(env *engine.Env, results []*gate.Result) {
	if env.Generation == nil {
		return
	}
	for i := len(results) - 1; i >= 0; i-- {
		if results[i] != nil && results[i].Pass {
			if rerr := RecordPerf(env, env.Generation.Key, results[i]); rerr != nil {
				env.Log.Warn("the gate's speed figures were not recorded", "error", rerr)
			}
			return
		}
	}
}

// switchFailed is the error of a switch none of whose candidates passed: each candidate's
// verdict, and what came back (restored, the gate's results on it).
func switchFailed(env *engine.Env, svc engine.ServiceStep, candidates []string, tried []gatedswitch.ProfileResult,
	res *switchover.Result, restored []*gate.Result, fe *switchover.FailedError) error {
	var parts []string
	for _, pr := range tried {
		name := pr.Profile
		if name == "" {
			name = svc.ServiceName()
		}
		parts = append(parts, fmt.Sprintf("%s: %s", name, pr.Summary()))
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
		env.Detail("restored_gate", restored)
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

// workerGate returns the gate of a worker node of a multi-node group, which judges
// through the head (gatedswitch.WorkerGateWith), each gate run as the step runs its own
// (logged and recorded); nil when env's node is no worker.
func (s *Step) workerGate(env *engine.Env, svc engine.ServiceStep) func(ctx context.Context, cfg gate.Config, srv switchover.Server) (*gate.Result, error) {
	return gatedswitch.WorkerGateWith(env, svc, func(ctx context.Context, cfg gate.Config, profile string) (*gate.Result, error) {
		return s.gate(ctx, env, cfg, profile)
	})
}

// fallbackNote is the summary's note of a gate that fell back from the profiles it tried
// first to won: "profile A failed the gate; B serves" ("" when the first one won).
func fallbackNote(tried []gatedswitch.ProfileResult, won string) string {
	var failed []string
	for _, t := range tried {
		if t.Profile != "" && t.Profile != won {
			failed = append(failed, t.Profile)
		}
	}
	if len(failed) == 0 || won == "" {
		return ""
	}
	word := "profile"
	if len(failed) > 1 {
		word = "profiles"
	}
	return fmt.Sprintf("%s %s failed the gate; %s serves", word, strings.Join(failed, ", "), won)
}
