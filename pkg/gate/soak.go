// The opt-in soak case: long prompts until the server's own metrics say its KV pool is
// nearly full, then short ones, every answer judged.

package gate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of a soak case.
const (
	DefaultSoakWords = 6000
	DefaultSoakWaves = 8
	DefaultSoakUntil = 0.9
	// DefaultSoakConcurrency is a wave's size when the case sets no concurrency.
	DefaultSoakConcurrency = 16
	// soakPoll is how often /metrics is read while a wave runs.
	soakPoll = 100 * time.Millisecond
)

// KindSoak is the soak case's kind.
const KindSoak = "kv-soak"

// Soak makes a case fill the server's KV cache: waves of concurrency prompts of Words
// words each, until SGLang's sglang:token_usage gauge (/metrics, --enable-metrics) reaches
// Until or Waves waves were sent, then one wave of short prompts; every answer must hold
// its own number. It takes minutes on a large pool: opt-in.
type Soak struct {
	// Words is each long prompt's length (default 6000).
	Words int `yaml:"words" json:"words,omitempty"`
	// Waves is the most waves of long prompts (default 8).
	Waves int `yaml:"waves" json:"waves,omitempty"`
	// Until is the share of the KV pool to reach, 0 to 1 (default 0.9).
	Until float64 `yaml:"until" json:"until,omitempty"`
}

func (s Soak) validate(c Case) error {
	if strings.TrimSpace(c.Prompt) != "" || c.Needle != nil || c.Accuracy != nil || c.Generate != "" || len(c.Tools) > 0 {
		return errors.New("a soak case takes no prompt, needle, accuracy, generate or tools: it generates its prompts")
	}
	if s.Words < 0 || s.Words > MaxNeedleWords {
		return fmt.Errorf("soak.words %d: want 0 to %d", s.Words, MaxNeedleWords)
	}
	if s.Waves < 0 || s.Waves > 100 {
		return fmt.Errorf("soak.waves %d: want 0 to 100", s.Waves)
	}
	if s.Until < 0 || s.Until > 1 {
		return fmt.Errorf("soak.until %g: want 0 to 1", s.Until)
	}
	return nil
}

// tokenUsage reads sglang:token_usage from the server's /metrics (the largest when
// several series carry it); found is false when the server exports none.
func tokenUsage(ctx context.Context, cfg Config) (usage float64, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+"/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	auth(req, cfg)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("asking /metrics: %s", shortErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, nil
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "sglang:token_usage") || strings.HasPrefix(line, "#") {
			continue
		}
		rest := strings.TrimPrefix(line, "sglang:token_usage")
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			usage, found = max(usage, v), true
		}
	}
	return usage, found, sc.Err()
}

// runSoak runs a soak case.
func runSoak(ctx context.Context, cfg Config, model string, k Case) CaseResult {
	s := *k.Soak
	s.Words = max(s.Words, 0)
	if s.Words == 0 {
		s.Words = DefaultSoakWords
	}
	if s.Waves == 0 {
		s.Waves = DefaultSoakWaves
	}
	if s.Until == 0 {
		s.Until = DefaultSoakUntil
	}
	wave := k.Concurrency
	if wave == 0 {
		wave = DefaultSoakConcurrency
	}
	cr := CaseResult{Name: k.Name, Kind: KindSoak}
	if _, found, err := tokenUsage(ctx, cfg); err != nil || !found {
		cr.Reason = "the server exports no sglang:token_usage on /metrics: launch it with --enable-metrics"
		if err != nil {
			cr.Reason = err.Error()
		}
		return cr
	}
	start := time.Now()
	var answers []answer
	peak := 0.0
	n := 0
	send := func(words int) []answer {
		base := n
		n += wave
		return askAll(ctx, cfg, wave, func(i int) request {
			p, num := NeedlePromptSeeded(cfg.Seed, base+i, words)
			return buildRequest(cfg, model, k, []Message{{Role: "user", Content: p}}, Expect{Regex: `\b` + num + `\b`}, 0, nil)
		})
	}
	waves := 0
	for waves < s.Waves && peak < s.Until {
		waves++
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(soakPoll)
			defer t.Stop()
			for {
				if u, _, err := tokenUsage(ctx, cfg); err == nil {
					peak = max(peak, u)
				}
				select {
				case <-done:
					return
				case <-t.C:
				}
			}
		}()
		answers = append(answers, send(s.Words)...)
		close(done)
		wg.Wait()
		if ctx.Err() != nil {
			break
		}
	}
	answers = append(answers, send(0)...)
	cr.Latency = time.Since(start)
	summarize(&cr, answers)
	if cr.Pass && peak < s.Until {
		cr.Pass = false
		cr.Reason = fmt.Sprintf("the KV pool reached %.0f%% (sglang:token_usage) after %d waves of %d prompts of %d words, short of soak.until %.0f%%: raise soak.words or concurrency",
			100*peak, waves, wave, s.Words, 100*s.Until)
		return cr
	}
	if cr.Pass {
		cr.Reason = fmt.Sprintf("ok: the KV pool reached %.0f%% after %d waves", 100*peak, waves)
	}
	return cr
}
