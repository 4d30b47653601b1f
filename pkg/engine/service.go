package engine

import "context"

// ServiceStep is implemented by a step that installs a long-running service from an ordered
// list of candidate backend profiles (the systemd kind). A smoke step that needs such a step
// drives the profile fallback through it: gate the active profile, and on failure Activate
// the next candidate, until one passes (Won) or none does (RestoreLastKnownGood).
type ServiceStep interface {
	Step
	// ServiceName is the unit's name, e.g. "sglang-qwen.service".
	ServiceName() string
	// Candidates returns the matching candidate profiles in the order to try them: the
	// profile that won last time first.
	Candidates(env *Env) []string
	// Active returns the profile the installed unit was rendered with ("" when none).
	Active(env *Env) string
	// Activate renders and installs the unit with profile and (re)starts the service.
	// env is the caller's; the service step records its own data under its own name.
	Activate(ctx context.Context, env *Env, profile string) error
	// Failed reports whether the service has failed (stopped and not coming back), with its
	// last log lines, so that a readiness wait can end at once.
	Failed(ctx context.Context) (failed bool, lastLines string, err error)
	// RestoreLastKnownGood reinstalls and restarts the last unit that passed the gate;
	// it reports false when there is none.
	RestoreLastKnownGood(ctx context.Context, env *Env) (bool, error)
	// Won records profile as the one that passed, to be tried first next time and kept
	// as last-known-good.
	Won(ctx context.Context, env *Env, profile string) error
}
