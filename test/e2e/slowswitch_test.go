package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The pins of the slow switch: the same server, at 1 ms a token and at 20 times that (a
// slow fallback kernel that answers right).
func init() {
	pins["v8-fast"] = [2]string{goodBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn --fake-token-latency=1ms"}
	pins["v9-slow"] = [2]string{goodBuild, "--fake-broken-if=fp4-gemm-backend=flashinfer_cudnn --fake-token-latency=1ms --fake-mode=slow"}
}

// slowRecipe is genRecipe whose gate also streams a story (a decode speed to compare) and
// refuses a candidate more than 3 times slower than the serving generation.
var slowRecipe = strings.Replace(genRecipe, `      ready_timeout: 90s
      cases:`, `      ready_timeout: 90s
      performance: {max_slowdown: 3}
      cases:
        - name: story
          prompt: "Write a story of about 200 words about a river."
          stream: true
          max_tokens: 400
          expect: {min_words: 150}`, 1)

// TestSwitchRefusesSlowGeneration: under real systemd, a new pin whose server answers
// right but 20 times slower than the serving generation's is refused (exit 3), the
// message naming both figures; the old generation is restored, serves and passes, and
// the current link still names it.
func TestSwitchRefusesSlowGeneration(t *testing.T) {
	requireE2E(t)
	if !strings.Contains(slowRecipe, "max_slowdown") {
		t.Fatal("the recipe was not rewritten")
	}
	bins := buildBinaries(t)
	g := newGenHost(t, bins)
	g.WriteFile(recipePath, []byte(slowRecipe), 0o644)

	a := g.applyPin("v8-fast")
	if a.code != 0 {
		t.Fatalf("apply v8-fast: exit %d\n%s\n%s", a.code, a.out, g.journal())
	}
	gen1 := g.current()
	exe1 := filepath.Join(genDir, gen1, "app/bin/fake-sglang")
	figures, err := os.ReadFile(filepath.Join(g.Root, stateDir, "gate-perf", gen1+".json"))
	if err != nil || !strings.Contains(string(figures), `"decode_tokens_per_second"`) {
		t.Fatalf("the serving generation's figures were not recorded: %v %s", err, figures)
	}
	t.Logf("generation %s recorded %s", gen1[:12], strings.TrimSpace(string(figures)))

	start := time.Now()
	a = g.applyPin("v9-slow")
	t.Logf("apply v9-slow took %s", time.Since(start).Round(time.Second))
	if a.code != 3 {
		t.Fatalf("apply v9-slow: exit %d, want 3\n%s\n%s", a.code, a.out, g.journal())
	}
	if i := strings.Index(a.out, "performance: decode "); i >= 0 {
		t.Logf("refused: %s", strings.SplitN(a.out[i:], "\n", 2)[0])
	}
	for _, want := range []string{"failed the gate", "performance: decode ", "slower than the serving generation's",
		"tokens/s (max_slowdown 3)", "of generation " + gen1[:12] + " was restored and passed the gate again"} {
		if !strings.Contains(a.out, want) {
			t.Errorf("apply v9-slow does not say %q:\n%s", want, a.out)
		}
	}
	if got := g.servingExe(); got != exe1 {
		t.Errorf("after the refused switch the server runs %q, want generation 1's %q", got, exe1)
	}
	if g.current() != gen1 {
		t.Errorf("current -> %s after a refused switch, want %s", g.current(), gen1)
	}
	g.gate("after the refused switch")
}
