package smoke

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/safefile"
	gate "github.com/sglprov/sglprov/pkg/smoke"
)

// PerfSpec is a gate's speed requirements: floors (for the GPU and model the recipe is
// for; a profile may set its own), and how much slower than the generation it would
// replace a candidate may be.
type PerfSpec struct {
	// MinDecodeTPS is the least median decode speed, tokens/s.
	MinDecodeTPS float64 `yaml:"min_decode_tokens_per_second" json:"min_decode_tokens_per_second,omitempty"`
	// MaxTTFT is the longest median time to the first token of the streamed cases ("2s").
	MaxTTFT string `yaml:"max_ttft" json:"max_ttft,omitempty"`
	// MaxSlowdown is how many times slower than the serving generation's last figures a
	// candidate may be (default 3): a slow fallback kernel answers right and is refused.
	MaxSlowdown float64 `yaml:"max_slowdown" json:"max_slowdown,omitempty"`
	// Profiles are floors per profile of the service, in place of the ones above.
	Profiles map[string]PerfFloors `yaml:"profiles" json:"profiles,omitempty"`
}

// PerfFloors are one profile's floors.
type PerfFloors struct {
	// MinDecodeTPS is the least median decode speed under this profile, tokens/s.
	MinDecodeTPS float64 `yaml:"min_decode_tokens_per_second" json:"min_decode_tokens_per_second,omitempty"`
	// MaxTTFT is the longest median time to the first token under this profile ("2s").
	MaxTTFT string `yaml:"max_ttft" json:"max_ttft,omitempty"`
}

func (f PerfFloors) floors(at string) (gate.Floors, error) {
	if f.MinDecodeTPS < 0 {
		return gate.Floors{}, fmt.Errorf("%s.min_decode_tokens_per_second %g must not be negative: %w", at, f.MinDecodeTPS, exitcode.ErrUsage)
	}
	d, err := duration(at+".max_ttft", f.MaxTTFT)
	return gate.Floors{MinDecodeTPS: f.MinDecodeTPS, MaxTTFT: d}, err
}

// apply sets cfg's floors and slowdown from p.
func (p *PerfSpec) apply(cfg *gate.Config) error {
	if p == nil {
		return nil
	}
	fl, err := PerfFloors{MinDecodeTPS: p.MinDecodeTPS, MaxTTFT: p.MaxTTFT}.floors("performance")
	if err != nil {
		return err
	}
	if p.MaxSlowdown != 0 && p.MaxSlowdown < 1 {
		return fmt.Errorf("performance.max_slowdown %g: want 1 or more (how many times slower a candidate may be): %w", p.MaxSlowdown, exitcode.ErrUsage)
	}
	for name, pf := range p.Profiles {
		if _, err := pf.floors("performance.profiles." + name); err != nil {
			return err
		}
	}
	cfg.Floors, cfg.MaxSlowdown = fl, p.MaxSlowdown
	return nil
}

// profileFloors returns cfg with profile's own floors, when the spec sets them.
func (p *PerfSpec) profileFloors(cfg gate.Config, profile string) gate.Config {
	if p == nil || profile == "" {
		return cfg
	}
	if pf, ok := p.Profiles[profile]; ok {
		if fl, err := pf.floors(""); err == nil {
			cfg.Floors = fl
		}
	}
	return cfg
}

// seedOf reads the replayed seed from the environment (gate.SeedEnv), 0 when unset.
func seedOf(getenv func(string) string) (uint64, error) {
	if getenv == nil {
		return 0, nil
	}
	v := getenv(gate.SeedEnv)
	if v == "" {
		return 0, nil
	}
	seed, err := gate.ParseSeed(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", gate.SeedEnv, err, exitcode.ErrUsage)
	}
	return seed, nil
}

// perfDir is where the gate keeps each generation's last passing figures, in the state
// directory.
const perfDir = "gate-perf"

// maxPerfBytes bounds a recorded figures file.
const maxPerfBytes = 64 << 10

var perfKey = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// perfPath is the file of generation key's figures ("" when there is none to name).
func perfPath(env *engine.Env, key string) string {
	if env == nil || env.StateDir == "" || !perfKey.MatchString(key) {
		return ""
	}
	return filepath.Join(env.StateDir, perfDir, key+".json")
}

// recordedPerf is a generation's figures as the gate records them.
type recordedPerf struct {
	Generation string    `json:"generation"`
	At         time.Time `json:"at"`
	Perf       gate.Perf `json:"perf"`
}

// RecordPerf keeps res's figures as generation key's last (a passing gate of the server
// that runs from it), for a later switch to compare its candidate with.
func RecordPerf(env *engine.Env, key string, res *gate.Result) error {
	path := perfPath(env, key)
	if path == "" || res == nil || !res.Pass || res.Perf == nil {
		return nil
	}
	b, err := json.Marshal(recordedPerf{Generation: key, At: time.Now().UTC(), Perf: *res.Perf})
	if err != nil {
		return fmt.Errorf("encoding the gate's figures: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("recording the gate's figures of generation %s: %w", key, err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("recording the gate's figures of generation %s: %w", key, err)
	}
	return nil
}

// ServingPerf returns the last recorded figures of generation key (nil when none were
// recorded); a file that cannot be read or parsed is an error naming it.
func ServingPerf(env *engine.Env, key string) (*gate.Perf, error) {
	path := perfPath(env, key)
	if path == "" {
		return nil, nil
	}
	b, err := safefile.ReadRegular(path, maxPerfBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the serving generation's gate figures: %w", err)
	}
	var rec recordedPerf
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("reading the serving generation's gate figures %s: %w", path, err)
	}
	return &rec.Perf, nil
}
