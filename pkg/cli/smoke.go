package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/node"
)

// smokeOptions are the flags of `sglprov smoke`.
type smokeOptions struct {
	url, model, recipe, step string
	seed                     string
	sets                     kvList
	insecure, json, builtin  bool
	readyTimeout             time.Duration
	requestTimeout           time.Duration
	maxTokens                int
}

// parseSmoke parses smoke's command line into its options.
func parseSmoke(stdio IO, args []string) (*smokeOptions, error) {
	var o smokeOptions
	fs := newFlags("smoke", stdio)
	fs.StringVar(&o.url, "url", "", "server base `URL`, e.g. http://127.0.0.1:30000")
	fs.StringVar(&o.model, "model", "", "model `NAME` to ask (default: the first of /v1/models)")
	fs.StringVar(&o.recipe, "f", "", "take the gate from the smoke step of recipe `FILE`")
	fs.StringVar(&o.recipe, "recipe", "", "take the gate from the smoke step of recipe `FILE`")
	fs.StringVar(&o.step, "step", "", "with -f: the smoke step's `NAME` (default: the first smoke step)")
	fs.Var(&o.sets, "set", "with -f: override a recipe var, `KEY=VALUE` (repeatable)")
	fs.BoolVar(&o.insecure, "insecure-permissions", false, "with -f: accept a recipe or question file that other users own or can write")
	fs.jsonFlags(&o.json, "print the verdict as JSON")
	fs.BoolVar(&o.builtin, "builtin", false, "ask the built-in cases of every kind (the default ones, a tool call and thinking) in place of the recipe's")
	fs.StringVar(&o.seed, "seed", "", "draw the fresh questions from `SEED` (a report's seed: replays its prompts; default: a new one, or $"+gate.SeedEnv+")")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 0, "how long to wait for readiness (default 20m)")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 0, "how long each question may take (default 2m)")
	fs.IntVar(&o.maxTokens, "max-tokens", 0, "max_tokens of each question (default 1024)")
	return &o, parse(fs, args)
}

// smokeRun runs the gate (its config from node.Deps.GateConfig) and prints its verdict; a
// failed gate returns an error wrapping exitcode.ErrGate that is marked as already reported.
func smokeRun(ctx context.Context, stdio IO, o *smokeOptions) error {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	cfg, err := stdio.Factory.Deps(stdio).GateConfig(ctx, node.GateOptions{URL: o.url, Model: o.model, Recipe: o.recipe,
		Step: o.step, Seed: o.seed, Sets: o.sets, Insecure: o.insecure, Builtin: o.builtin,
		ReadyTimeout: o.readyTimeout, RequestTimeout: o.requestTimeout, MaxTokens: o.maxTokens})
	if err != nil {
		return err
	}
	if !o.json {
		fmt.Fprintf(stdio.Stderr, "waiting for %s to get ready (up to %s)\n", gate.RedactURL(cfg.URL), readyTimeoutOf(cfg))
	}
	var wait *gate.WaitReporter
	if isTerminal(stdio.Stderr) {
		wait = gate.NewWaitReporter(gate.RedactURL(cfg.URL), stdio.Stderr, nil, 0)
	} else {
		wait = gate.NewWaitReporter(gate.RedactURL(cfg.URL), nil, func(line string, _ gate.WaitStatus) { fmt.Fprintln(stdio.Stderr, line) }, 0)
	}
	cfg.Waiting = wait.Update
	res, err := gate.Run(ctx, cfg)
	wait.Stop()
	if err != nil {
		return fmt.Errorf("%w: %w", exitcode.ErrUsage, err)
	}
	if o.json {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("writing the verdict: %w", err)
		}
	} else if err := gate.WriteTable(stdio.Stdout, res); err != nil {
		return fmt.Errorf("writing the verdict: %w", err)
	}
	if !res.Pass {
		if ctx.Err() != nil {
			return fmt.Errorf("smoke gate interrupted: %w", ctx.Err())
		}
		return reported(fmt.Errorf("%w: %s", exitcode.ErrGate, res.Summary()))
	}
	return nil
}

func readyTimeoutOf(cfg gate.Config) time.Duration {
	if cfg.ReadyTimeout > 0 {
		return cfg.ReadyTimeout
	}
	return gate.DefaultReadyTimeout
}
