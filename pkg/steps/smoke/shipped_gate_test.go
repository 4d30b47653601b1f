package smoke

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// shippedGates are the shipped recipes whose gates judge a real server.
var shippedGates = []string{
	"qwen3.5-397b-a17b-nvfp4-sm120.yaml",
	"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.20.yaml",
	"qwen3.5-397b-a17b-nvfp4-sm120-sglang-0.5.21.yaml",
	"qwen3-235b-a22b-fp8-sm90.yaml",
	"demo.yaml",
}

// shippedSpec renders a shipped recipe's smoke step, and returns its vars.
func shippedSpec(t *testing.T, file string) (Spec, map[string]string) {
	t.Helper()
	kinds := recipe.KindSpecs{"smoke": func() any { return new(Spec) }}
	for _, k := range []string{"source", "patch", "build", "download", "systemd", "command", "packages", "allreduce"} {
		kinds[k] = func() any { return new(map[string]any) }
	}
	r, err := recipe.Load(filepath.Join("..", "..", "..", "recipes", file), kinds, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.NewData(nil)
	if err != nil {
		t.Fatal(err)
	}
	var spec Spec
	if err := r.Step("smoke").Render(data, &spec); err != nil {
		t.Fatal(err)
	}
	return spec, r.Vars
}

// TestShippedGatesSeeLongContextAndMixedBatches: every shipped recipe's gate fails a
// server that answers garbage only to prompts past one prefill chunk (exit 3, naming the
// long-context case), and one that answers garbage only to batches of mixed prompt lengths
// (exit 3, naming the load and long-context cases); the good server passes.
func TestShippedGatesSeeLongContextAndMixedBatches(t *testing.T) {
	for _, file := range shippedGates {
		t.Run(file, func(t *testing.T) {
			spec, vars := shippedSpec(t, file)
			longAbove, _ := strconv.Atoi(vars["chunked_prefill_size"])
			for _, tc := range []struct {
				mode  fakesglang.Mode
				cases []string // the failing cases, named in the error
			}{
				{fakesglang.ModeGood, nil},
				{fakesglang.ModeLongContext, []string{"long-context"}},
				{fakesglang.ModeMixedBatch, []string{"load", "long-context"}},
			} {
				srv := httptest.NewServer(fakesglang.New(fakesglang.Options{Mode: tc.mode, Model: spec.Model,
					LongAbove: longAbove}))
				s := spec
				s.URL = srv.URL
				step, err := New("smoke", s)
				if err != nil {
					t.Fatal(err)
				}
				env, out := newEnv(t, nil)
				err = step.Run(context.Background(), env)
				srv.Close()
				if tc.cases == nil {
					if err != nil {
						t.Errorf("%s: %v\n%s", tc.mode, err, out)
					}
					continue
				}
				if !errors.Is(err, exitcode.ErrGate) || exitcode.Of(err) != exitcode.ExitGate {
					t.Fatalf("%s: want exit %d, got %d: %v", tc.mode, exitcode.ExitGate, exitcode.Of(err), err)
				}
				for _, c := range tc.cases {
					if !strings.Contains(err.Error(), c+": ") {
						t.Errorf("%s: error does not name case %s: %v", tc.mode, c, err)
					}
				}
				if want := len(spec.Cases) - len(tc.cases); !strings.Contains(err.Error(),
					"FAIL: "+strconv.Itoa(want)+"/"+strconv.Itoa(len(spec.Cases))+" cases passed") {
					t.Errorf("%s: want only %v failed: %v", tc.mode, tc.cases, err)
				}
			}
		})
	}
}

// trafficModeCases are, per broken way of asking, the cases of a shipped SM120 gate that
// must refuse it.
var trafficModeCases = []struct {
	mode  fakesglang.Mode
	cases []string
}{
	{fakesglang.ModeSampling, []string{"sampled", "load"}},
	{fakesglang.ModeStreaming, []string{"streamed", "long-generation"}},
	{fakesglang.ModePrefixHit, []string{"prefix-cache"}},
	{fakesglang.ModeSecondTurn, []string{"multi-turn"}},
	{fakesglang.ModeNative, []string{"completions", "native"}},
	{fakesglang.ModeNaNLogprobs, []string{"sampled", "completions", "native"}},
	{fakesglang.ModeZeroUsage, []string{"arithmetic", "sampled"}},
	{fakesglang.ModeBadJSON, []string{"json"}},
	{fakesglang.ModeCJK, []string{"cjk"}},
	{fakesglang.ModeWordLoop, []string{"long-generation"}},
	{fakesglang.ModeWrongUnseen, []string{"facts"}},
	{fakesglang.ModeMemorizer, []string{"sweep", "facts", "load"}},
	{fakesglang.ModeSlow, []string{"performance"}},
}

// TestShippedGatesSeeTrafficModes: every shipped SM120 gate (and the Hopper one) refuses
// each server that breaks one way of asking only (exit 3, naming the case that asks that
// way), while the healthy server passes every case. The memorizer knows every prompt of
// the healthy run; the slow server is judged against the healthy run's figures, as a
// switch judges a candidate against the serving generation's.
func TestShippedGatesSeeTrafficModes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every shipped gate against every broken way of asking")
	}
	for _, file := range shippedGates[:4] {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			spec, vars := shippedSpec(t, file)
			longAbove, _ := strconv.Atoi(vars["chunked_prefill_size"])
			run := func(mode fakesglang.Mode, memo map[string]bool, direct bool, base *gate.Perf) (*gate.Result, error, *fakesglang.Server) {
				f := fakesglang.New(fakesglang.Options{Mode: mode, Model: spec.Model, LongAbove: longAbove,
					TokenLatency: 50 * time.Microsecond, Memorized: memo, CacheReport: true})
				srv := httptest.NewServer(f)
				defer srv.Close()
				s := spec
				s.URL = srv.URL
				step, err := New("smoke", s)
				if err != nil {
					t.Fatal(err)
				}
				if direct {
					// The switch's comparison: the candidate against the serving figures.
					cfg, err := s.Config(nil)
					if err != nil {
						t.Fatal(err)
					}
					cfg.Baseline = base
					res, err := gate.Run(context.Background(), cfg)
					if err != nil {
						t.Fatal(err)
					}
					if !res.Pass {
						return res, fmt.Errorf("%w: %s", exitcode.ErrGate, res.Summary()), f
					}
					return res, nil, f
				}
				env, _ := newEnv(t, nil)
				return nil, step.Run(context.Background(), env), f
			}
			healthy, err, good := run(fakesglang.ModeGood, nil, true, nil)
			if err != nil {
				t.Fatalf("healthy: %v", err)
			}
			memo := map[string]bool{}
			for _, p := range good.Prompts() {
				memo[p] = true
			}
			for _, tc := range trafficModeCases {
				var base *gate.Perf
				if tc.mode == fakesglang.ModeSlow {
					base = healthy.Perf
				}
				_, err, _ := run(tc.mode, memo, base != nil, base)
				if !errors.Is(err, exitcode.ErrGate) || exitcode.Of(err) != exitcode.ExitGate {
					t.Errorf("%s: want exit %d, got %d: %v", tc.mode, exitcode.ExitGate, exitcode.Of(err), err)
					continue
				}
				for _, c := range tc.cases {
					if !strings.Contains(err.Error(), c+": ") {
						t.Errorf("%s: error does not name case %s: %v", tc.mode, c, err)
					}
				}
			}
		})
	}
}

// TestShippedGateCost: the cost DESIGN.md states for each shipped gate (requests and
// prompt words sent to a healthy server) holds, so that a new case that would blow the
// readiness budget shows here.
func TestShippedGateCost(t *testing.T) {
	for _, file := range shippedGates[:4] {
		spec, _ := shippedSpec(t, file)
		f := fakesglang.New(fakesglang.Options{Mode: fakesglang.ModeGood, Model: spec.Model})
		srv := httptest.NewServer(f)
		s := spec
		s.URL = srv.URL
		cfg, err := s.Config(nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := gate.Run(context.Background(), cfg)
		srv.Close()
		if err != nil || !res.Pass {
			t.Fatalf("%s: %v %s", file, err, res.Summary())
		}
		words := 0
		for _, p := range f.Prompts() {
			words += len(strings.Fields(p))
		}
		n := len(f.Prompts())
		t.Logf("%s: %d cases, %d requests, %d prompt words", file, len(res.Cases), n, words)
		if n < 170 || n > 190 || words < 100000 || words > 110000 {
			t.Errorf("%s: %d requests and %d prompt words; DESIGN.md states about 180 and 106,000", file, n, words)
		}
	}
}
