package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gate"
)

// TestGatePerfMetrics: the gate's speed figures (all answers and per case kind) are
// exported after an apply.
func TestGatePerfMetrics(t *testing.T) {
	m := NewMetrics()
	res := &gate.Result{Pass: true, Ready: true, Perf: &gate.Perf{DecodeTPS: 41.5, TTFT: 250 * time.Millisecond,
		Kinds: map[string]gate.KindPerf{"long-generation": {DecodeTPS: 40, TTFT: 300 * time.Millisecond}}}}
	m.ObserveApply("r", &engine.Report{Started: time.Unix(1700000000, 0), Steps: []*engine.StepReport{
		{Name: "smoke", Kind: "smoke", Gate: true, Result: engine.ResultOK, Details: map[string]any{gate.DetailKey: res}},
	}}, nil)
	path := filepath.Join(t.TempDir(), "m.prom")
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{`sglprov_gate_decode_tokens_per_second{kind="all",recipe="r"} 41.5`,
		`sglprov_gate_ttft_seconds{kind="all",recipe="r"} 0.25`,
		`sglprov_gate_decode_tokens_per_second{kind="long-generation",recipe="r"} 40`,
		`sglprov_gate_ttft_seconds{kind="long-generation",recipe="r"} 0.3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q:\n%s", want, b)
		}
	}
}
