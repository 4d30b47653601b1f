package gatespec

import (
	"fmt"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
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

// ProfileFloors returns cfg with profile's own floors, when the spec sets them (p may be
// nil: cfg as it is).
func (p *PerfSpec) ProfileFloors(cfg gate.Config, profile string) gate.Config {
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
