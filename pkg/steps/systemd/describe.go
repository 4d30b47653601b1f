package systemd

import (
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
)

// Describe returns the unit, the profile and the server's command line as they would be
// installed now, for plan.
func (s *Step) Describe(env *engine.Env) []string {
	p, err := s.pick(env)
	if err != nil {
		return []string{"cannot choose a profile: " + err.Error()}
	}
	d, err := s.data(env, p)
	if err != nil {
		return []string{"cannot render the unit: " + err.Error()}
	}
	profile := p
	if profile == "" {
		profile = "none"
	}
	return []string{
		"unit " + s.spec.Unit + ", profile " + profile + ", candidates " + strings.Join(s.Candidates(env), ", "),
		"ExecStart: " + strings.Join(d.Argv(), " "),
	}
}
