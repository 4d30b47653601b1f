package gatespec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/exitcode"
	gatepkg "github.com/sglprov/sglprov/pkg/gate"
)

// TestPerformanceSpec: floors, a profile's floors, max_slowdown and the seed variable
// reach the gate's config; bad values are usage errors naming the field.
func TestPerformanceSpec(t *testing.T) {
	spec := Spec{URL: "http://127.0.0.1:1", ReadyTimeout: "20s", RequestTimeout: "2s", MaxTokens: 200, Cases: gatepkg.BuiltinCases()}
	spec.Performance = &PerfSpec{MinDecodeTPS: 12, MaxTTFT: "2s", MaxSlowdown: 4,
		Profiles: map[string]PerfFloors{"cutlass": {MinDecodeTPS: 30}}}
	cfg, err := spec.Config(func(k string) string {
		if k == gatepkg.SeedEnv {
			return "12345"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Floors.MinDecodeTPS != 12 || cfg.Floors.MaxTTFT != 2*time.Second || cfg.MaxSlowdown != 4 || cfg.Seed != 12345 {
		t.Errorf("config %+v", cfg)
	}
	if got := spec.Performance.ProfileFloors(cfg, "cutlass"); got.Floors.MinDecodeTPS != 30 {
		t.Errorf("profile floors %+v", got.Floors)
	}
	for _, tc := range []struct {
		p    PerfSpec
		env  string
		want string
	}{
		{PerfSpec{MinDecodeTPS: -1}, "", "min_decode_tokens_per_second -1"},
		{PerfSpec{MaxTTFT: "soon"}, "", `max_ttft "soon"`},
		{PerfSpec{MaxSlowdown: 0.5}, "", "max_slowdown 0.5"},
		{PerfSpec{Profiles: map[string]PerfFloors{"x": {MaxTTFT: "-1s"}}}, "", "performance.profiles.x.max_ttft"},
		{PerfSpec{}, "abc", gatepkg.SeedEnv},
	} {
		s := spec
		s.Performance = &tc.p
		_, err := s.Config(func(k string) string {
			if k == gatepkg.SeedEnv {
				return tc.env
			}
			return ""
		})
		if !errors.Is(err, exitcode.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
}
