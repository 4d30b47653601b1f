package systemd

import (
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Describe returns the unit, the profile and the server's command line as they would be
// installed now, and how the unit differs from the one installed, for plan.
func (s *Step) Describe(env *engine.Env) []string {
	p, err := s.pick(env)
	if err != nil {
		return []string{"cannot choose a profile: " + err.Error()}
	}
	d, err := s.data(env, p)
	if err != nil {
		return []string{"cannot render the unit: " + err.Error()}
	}
	picked := p
	head := "unit " + s.spec.Unit + ", no backend profile"
	if c := s.Candidates(env); p != "" || len(c) > 0 {
		if p == "" {
			p = "none"
		}
		head = "unit " + s.spec.Unit + ", profile " + p + ", candidates " + strings.Join(c, ", ")
	}
	out := []string{head, "ExecStart: " + strings.Join(d.Argv(), " "), "PATH: " + d.Env["PATH"]}
	if n := s.needs(); len(n) > 0 {
		out = append(out, "needs on PATH before start: "+strings.Join(n, ", "))
	}
	if env.Facts.Count() > 1 {
		for _, r := range s.ncclDecision(env, d.Profile.Name).Reasons {
			out = append(out, "NCCL: "+r)
		}
	}
	out = append(out, s.describeGroup(env, d.Profile.Name)...)
	return append(out, s.unitDiff(env, picked)...)
}
