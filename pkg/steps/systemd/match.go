package systemd

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/sglargs"
)

// quantization returns the model's quantization: the value of --quantization in the
// step's args ("" when not set).
func (s *Step) quantization() string {
	q, _ := flagValue(s.spec.Args, "--quantization")
	return q
}

// mismatch says why profile p does not fit the host and model ("" when it does).
func (s *Step) mismatch(env *engine.Env, name string, p recipe.Profile) (string, error) {
	if expr := p.Match.ComputeCapability; expr != "" {
		ccs := env.Facts.ComputeCapabilities()
		if env.Facts == nil {
			return fmt.Sprintf("%s needs compute capability %s and no GPU facts were gathered (does the recipe have a requires: gpu section?)", name, expr), nil
		}
		if len(ccs) == 0 {
			return fmt.Sprintf("%s needs compute capability %s and no GPU was found", name, expr), nil
		}
		for _, cc := range ccs {
			ok, err := gpu.MatchCC(expr, cc)
			if err != nil {
				return "", fmt.Errorf("%w: profile %s: compute_capability %q: %w", exitcode.ErrUsage, name, expr, err)
			}
			if !ok {
				return fmt.Sprintf("%s needs compute capability %s", name, expr), nil
			}
		}
	}
	if counts := p.Match.GPUCounts; len(counts) > 0 && !slices.Contains(counts, env.Facts.Count()) {
		return fmt.Sprintf("%s is for %s GPUs (this host has %d)", name, joinInts(counts), env.Facts.Count()), nil
	}
	if want := p.Match.Quantization; want != "" {
		if have := s.quantization(); have != want {
			if have == "" {
				have = "none"
			}
			return fmt.Sprintf("%s needs quantization %s (its match.quantization; the step's --quantization arg is %s)", name, want, have), nil
		}
	}
	if len(p.Match.Check) > 0 {
		if why := runCheck(context.Background(), p.Match.Check); why != "" {
			env.Log.Warn("profile refused by its check", "profile", name, "reason", why)
			return fmt.Sprintf("%s refused by its check: %s", name, why), nil
		}
	}
	return "", nil
}

// Check refuses a profile the step names that the recipe does not define (validate): the
// choice among the defined ones needs the host, the names do not. It also refuses profiles
// of which none can match the step's quantization, which no host could change.
func (s *Step) Check(env *engine.Env) error {
	for i, name := range s.spec.Profiles {
		if _, ok := env.Profiles[name]; !ok {
			return engine.AtField(fmt.Sprintf("profiles[%d]", i), fmt.Errorf("%w: profile %q is not defined in the recipe's profiles (profiles: %s)", exitcode.ErrUsage, name, profileNames(env.Profiles)))
		}
	}
	if err := s.checkGroupPorts(env); err != nil {
		return err
	}
	return engine.AtField("args", s.quantizationFault(env))
}

// checkGroupPorts refuses, for every profile the step may run, a group whose head's ports
// take the server's API port (portClash): validate says so on any host.
func (s *Step) checkGroupPorts(env *engine.Env) error {
	g, ok := groupOf(env)
	if !ok {
		return nil
	}
	profiles := s.spec.Profiles
	if len(profiles) == 0 {
		profiles = []string{""}
	}
	for _, p := range profiles {
		all := s.lineArgs(env, p)
		port, err := s.port, error(nil)
		if v, ok := flagValue(all, sglargs.Spellings("--port")...); ok {
			port, err = strconv.Atoi(v)
		}
		if err != nil {
			continue // the renderer says what is wrong with the port
		}
		g.DPAttention = hasFlag(all, "--enable-dp-attention")
		if err := portClash(g, port); err != nil {
			return err
		}
	}
	return nil
}

// quantizationFault returns an error wrapping exitcode.ErrUsage when every profile the step
// names wants a quantization (match.quantization) other than the step's own --quantization
// arg: no host could match one, so it is the recipe's fault, not the host's.
func (s *Step) quantizationFault(env *engine.Env) error {
	if len(s.spec.Profiles) == 0 {
		return nil
	}
	have := s.quantization()
	var wants []string
	for _, name := range s.spec.Profiles {
		want := env.Profiles[name].Match.Quantization
		if want == "" || want == have {
			return nil
		}
		wants = append(wants, name+" wants "+want)
	}
	shown := have
	if shown == "" {
		shown = "not set"
	}
	return fmt.Errorf("%w: none of the profiles %s can match: a profile's match.quantization is compared with the step's "+
		"--quantization arg, which is %s (%s); add --quantization with the model's quantization to the step's args, "+
		"or change or remove the profiles' match.quantization",
		exitcode.ErrUsage, strings.Join(s.spec.Profiles, ", "), shown, strings.Join(wants, "; "))
}

// profileNames lists the recipe's profiles by name, sorted ("none" when there are none).
func profileNames(ps map[string]recipe.Profile) string {
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// matching returns the step's profiles that match the host and model, in recipe order;
// nil when the step names no profiles. None matching is an error (wrapping exitcode.ErrHost)
// naming the GPUs' compute capability and why each profile was passed over.
func (s *Step) matching(env *engine.Env) ([]string, error) {
	if len(s.spec.Profiles) == 0 {
		return nil, nil
	}
	if err := s.quantizationFault(env); err != nil {
		return nil, err
	}
	var out, why []string
	for _, name := range s.spec.Profiles {
		p, ok := env.Profiles[name]
		if !ok {
			return nil, fmt.Errorf("%w: profile %q is not defined in the recipe's profiles", exitcode.ErrUsage, name)
		}
		reason, err := s.mismatch(env, name, p)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			why = append(why, reason)
			continue
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		cc := strings.Join(env.Facts.ComputeCapabilities(), ", ")
		if cc == "" {
			cc = "none (no GPU found)"
		}
		return nil, fmt.Errorf("%w: none of the profiles %s matches this host (GPU compute capability %s): %s",
			exitcode.ErrHost, strings.Join(s.spec.Profiles, ", "), cc, strings.Join(why, "; "))
	}
	return out, nil
}

// candidates returns the matching profiles with the recorded winner first.
func (s *Step) candidates(env *engine.Env) ([]string, error) {
	m, err := s.matching(env)
	if err != nil || len(m) == 0 {
		return m, err
	}
	rec := s.load(env)
	if rec.Winner == "" || rec.Winner == m[0] {
		return m, nil
	}
	for i, p := range m {
		if p == rec.Winner {
			out := append([]string{p}, m[:i]...)
			return append(out, m[i+1:]...), nil
		}
	}
	return m, nil
}

// joinInts writes counts as "4 or 8".
func joinInts(counts []int) string {
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, " or ")
}
