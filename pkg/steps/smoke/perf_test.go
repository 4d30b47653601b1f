package smoke

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	gatepkg "github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// storyCase is a short streamed long generation: enough tokens for a decode speed.
func storyCase() gatepkg.Case {
	return gatepkg.Case{Name: "story", Prompt: "Write a story of about 60 words about a river.", Stream: true,
		Expect: gatepkg.Expect{MinWords: 40}}
}

// TestSwitchRefusesSlowCandidate: a candidate generation 20 times slower than the
// serving generation's recorded figures is refused (exit 3), the message naming both
// figures; the old unit is restored; a candidate as fast is promoted and its figures
// recorded for the next switch.
func TestSwitchRefusesSlowCandidate(t *testing.T) {
	svc := newFakeService(t, []string{"cutlass"}, map[string]fakesglang.Mode{"cutlass": fakesglang.ModeSlow})
	spec := testSpec(svc.srv.URL)
	spec.RequestTimeout = "30s"
	spec.Cases = []gatepkg.Case{gatepkg.BuiltinCases()[0], storyCase()}
	step, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	env, out := newEnv(t, map[string]engine.Step{"sglang-service": svc})
	env.StateDir = t.TempDir()
	env.Generation = &engine.GenerationInfo{Key: "g2", Serving: "g1"}
	// The serving generation's last gate: a streamed decode of 1000 tokens/s.
	if err := RecordPerf(env, "g1", &gatepkg.Result{Pass: true, Perf: &gatepkg.Perf{DecodeTPS: 1000, TTFT: 5 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	err = step.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrGate) || exitcode.Of(err) != exitcode.ExitGate {
		t.Fatalf("want exit 3, got %v\n%s", err, out)
	}
	for _, want := range []string{"generation g2 failed the gate", "performance: decode ", "slower than the serving generation's 1000.0 tokens/s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if svc.restored != 1 {
		t.Errorf("restored %d times", svc.restored)
	}
	// The same candidate within 3x of the serving generation's figures passes, and its
	// figures become the next baseline.
	svc2 := newFakeService(t, []string{"cutlass"}, map[string]fakesglang.Mode{"cutlass": fakesglang.ModeGood})
	spec.URL = svc2.srv.URL
	step2, _ := New("smoke", spec)
	env2, out2 := newEnv(t, map[string]engine.Step{"sglang-service": svc2})
	env2.StateDir, env2.Generation = env.StateDir, env.Generation
	if err := step2.Run(context.Background(), env2); err != nil {
		t.Fatalf("fast candidate: %v\n%s", err, out2)
	}
	got, err := ServingPerf(env2, "g2")
	if err != nil || got == nil || got.DecodeTPS <= 0 {
		t.Fatalf("recorded %+v %v", got, err)
	}
}

// TestServingPerfFile: a figures file that is not the gate's is an error naming it; a
// generation key that could name another path is not used.
func TestServingPerfFile(t *testing.T) {
	env, _ := newEnv(t, nil)
	env.StateDir = t.TempDir()
	if p, err := ServingPerf(env, "g1"); p != nil || err != nil {
		t.Fatalf("no file: %v %v", p, err)
	}
	path := filepath.Join(env.StateDir, perfDir, "g1.json")
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	_ = os.WriteFile(path, []byte("not json"), 0o644)
	if _, err := ServingPerf(env, "g1"); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad file: %v", err)
	}
	if perfPath(env, "../x") != "" {
		t.Error("a key with a slash names a path")
	}
}
