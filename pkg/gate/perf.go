// The gate's speed figures: time to first token and decode tokens/s per case kind, the
// floors a profile may set, and the comparison with the generation a candidate would
// replace.

package gate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Figures of speed the gate reads from the answers.
const (
	// MinDecodeTokens is the fewest completion tokens an unstreamed answer must have for
	// its tokens/latency to count as a decode speed (shorter ones are mostly prefill).
	MinDecodeTokens = 32
	// DefaultMaxSlowdown is how many times slower than the serving generation a candidate
	// may be when the recipe sets no max_slowdown.
	DefaultMaxSlowdown = 3.0
	// MinDecodeTokenGap is how much longer a candidate's time per decoded token must be
	// than the serving generation's before a ratio counts: below it the figures are the
	// host's scheduling noise (a server answering from memory in microseconds per token),
	// not a slower kernel (a real fallback costs tens of milliseconds per token).
	MinDecodeTokenGap = time.Millisecond
	// MinTTFTGap is the same for the time to the first token.
	MinTTFTGap = 50 * time.Millisecond
)

// perTokenGap is how much longer a token takes at tps than at base tokens/s.
func perTokenGap(tps, base float64) time.Duration {
	return time.Duration(float64(time.Second)/tps - float64(time.Second)/base)
}

// Floors are the least speed a server must show (zero: no floor).
type Floors struct {
	// MinDecodeTPS is the least median decode speed, in tokens per second.
	MinDecodeTPS float64 `yaml:"min_decode_tokens_per_second" json:"min_decode_tokens_per_second,omitempty"`
	// MaxTTFT is the longest median time to the first token of the streamed cases.
	MaxTTFT time.Duration `yaml:"-" json:"-"`
}

// Perf are a run's speed figures: the medians over all its answers, and per case kind.
type Perf struct {
	// TTFT is the median time to the first token of the streamed answers (0: none).
	TTFT time.Duration `json:"-"`
	// DecodeTPS is the median decode speed in tokens per second (0: no answer gave one).
	DecodeTPS float64 `json:"decode_tokens_per_second"`
	// Kinds are the same figures per case kind.
	Kinds map[string]KindPerf `json:"kinds,omitempty"`
}

// KindPerf are the speed figures of one case kind.
type KindPerf struct {
	TTFT      time.Duration `json:"-"`
	DecodeTPS float64       `json:"decode_tokens_per_second"`
}

// MarshalJSON writes TTFT as ttft_ms.
func (p KindPerf) MarshalJSON() ([]byte, error) {
	type plain KindPerf
	return json.Marshal(struct {
		plain
		TTFTMS float64 `json:"ttft_ms"`
	}{plain(p), ms(p.TTFT)})
}

// MarshalJSON writes TTFT as ttft_ms.
func (p Perf) MarshalJSON() ([]byte, error) {
	type plain Perf
	return json.Marshal(struct {
		plain
		TTFTMS float64 `json:"ttft_ms"`
	}{plain(p), ms(p.TTFT)})
}

// UnmarshalJSON reads what MarshalJSON writes (a recorded generation's figures).
func (p *Perf) UnmarshalJSON(b []byte) error {
	var raw struct {
		DecodeTPS float64 `json:"decode_tokens_per_second"`
		TTFTMS    float64 `json:"ttft_ms"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	p.DecodeTPS, p.TTFT = raw.DecodeTPS, time.Duration(raw.TTFTMS*float64(time.Millisecond))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// decodeTPS is an answer's decode speed: of a stream, the tokens after the first over
// the time after it; of a whole answer of MinDecodeTokens or more, its tokens over its
// latency. 0 when the answer gives none.
func (a answer) decodeTPS() float64 {
	switch {
	case !a.pass || a.tokens <= 1:
		return 0
	case a.ttft > 0 && a.latency > a.ttft:
		return float64(a.tokens-1) / (a.latency - a.ttft).Seconds()
	case a.ttft == 0 && a.tokens >= MinDecodeTokens && a.latency > 0:
		return float64(a.tokens) / a.latency.Seconds()
	}
	return 0
}

// casePerf fills a case's figures from its answers.
func casePerf(cr *CaseResult, answers []answer) {
	var ttfts []time.Duration
	var tps []float64
	for _, a := range answers {
		if a.pass && a.ttft > 0 {
			ttfts = append(ttfts, a.ttft)
		}
		if v := a.decodeTPS(); v > 0 {
			tps = append(tps, v)
		}
	}
	if len(ttfts) > 0 {
		sort.Slice(ttfts, func(i, j int) bool { return ttfts[i] < ttfts[j] })
		cr.TTFT = percentile(ttfts, 50)
	}
	cr.DecodeTPS = median(tps)
	cr.tps, cr.ttfts = tps, ttfts
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

// perfOf gathers the run's figures from its cases (nil when none gave any).
func perfOf(cases []CaseResult) *Perf {
	var all []float64
	var allT []time.Duration
	kinds := map[string]KindPerf{}
	byKind := map[string][]float64{}
	byKindT := map[string][]time.Duration{}
	for _, c := range cases {
		all = append(all, c.tps...)
		allT = append(allT, c.ttfts...)
		byKind[c.Kind] = append(byKind[c.Kind], c.tps...)
		byKindT[c.Kind] = append(byKindT[c.Kind], c.ttfts...)
	}
	if len(all) == 0 && len(allT) == 0 {
		return nil
	}
	medT := func(v []time.Duration) time.Duration {
		if len(v) == 0 {
			return 0
		}
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		return percentile(v, 50)
	}
	for k := range byKind {
		if len(byKind[k]) == 0 && len(byKindT[k]) == 0 {
			continue
		}
		kinds[k] = KindPerf{TTFT: medT(byKindT[k]), DecodeTPS: median(byKind[k])}
	}
	return &Perf{TTFT: medT(allT), DecodeTPS: median(all), Kinds: kinds}
}

// performance judges the run's figures against the floors and the baseline; judged is
// false when neither is set.
func performance(cfg Config, p *Perf) (cr CaseResult, judged bool) {
	if cfg.Floors.MinDecodeTPS <= 0 && cfg.Floors.MaxTTFT <= 0 && cfg.Baseline == nil {
		return cr, false
	}
	cr = CaseResult{Name: KindPerformance, Kind: KindPerformance}
	if p == nil {
		p = &Perf{}
	}
	var why []string
	if f := cfg.Floors.MinDecodeTPS; f > 0 && p.DecodeTPS < f {
		why = append(why, fmt.Sprintf("decode %.1f tokens/s, below the floor %.1f", p.DecodeTPS, f))
	}
	if f := cfg.Floors.MaxTTFT; f > 0 && (p.TTFT == 0 || p.TTFT > f) {
		why = append(why, fmt.Sprintf("time to first token %s, above the ceiling %s", roundDuration(p.TTFT), f))
	}
	if b := cfg.Baseline; b != nil {
		ratio := cfg.MaxSlowdown
		if ratio <= 0 {
			ratio = DefaultMaxSlowdown
		}
		if b.DecodeTPS > 0 && p.DecodeTPS > 0 && b.DecodeTPS/p.DecodeTPS > ratio && perTokenGap(p.DecodeTPS, b.DecodeTPS) >= MinDecodeTokenGap {
			why = append(why, fmt.Sprintf("decode %.1f tokens/s is %.1fx slower than the serving generation's %.1f tokens/s (max_slowdown %g)",
				p.DecodeTPS, b.DecodeTPS/p.DecodeTPS, b.DecodeTPS, ratio))
		}
		if b.TTFT > 0 && p.TTFT > 0 && float64(p.TTFT)/float64(b.TTFT) > ratio && p.TTFT-b.TTFT >= MinTTFTGap {
			why = append(why, fmt.Sprintf("time to first token %s is %.1fx the serving generation's %s (max_slowdown %g)",
				roundDuration(p.TTFT), float64(p.TTFT)/float64(b.TTFT), roundDuration(b.TTFT), ratio))
		}
		if b.DecodeTPS > 0 && p.DecodeTPS == 0 {
			why = append(why, "no answer gave a decode speed to compare with the serving generation's")
		}
	}
	cr.Sample = fmt.Sprintf("decode %.1f tokens/s, ttft %s", p.DecodeTPS, roundDuration(p.TTFT))
	cr.DecodeTPS, cr.TTFT = p.DecodeTPS, p.TTFT
	if len(why) > 0 {
		cr.Reason = strings.Join(why, "; ")
		return cr, true
	}
	cr.Pass, cr.Reason = true, "ok"
	return cr, true
}
