package engine

import (
	"context"

	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// ServiceStep is implemented by a step that installs a long-running service from an ordered
// list of candidate backend profiles (the systemd kind). A smoke step that needs such a step
// changes what serves only through the switch transaction the step hands out
// (pkg/switchover): stage each candidate, gate it against its own server, promote the first
// that passes or restore the last unit that passed. The daemon's rungs and roll back run the
// same transaction.
type ServiceStep interface {
	Step
	// ServiceName is the unit's name, e.g. "sglang-qwen.service".
	ServiceName() string
	// Candidates returns the matching candidate profiles in the order to try them: the
	// profile that won last time first.
	Candidates(env *Env) []string
	// Active returns the profile the installed unit was rendered with ("" when none).
	Active(env *Env) string
	// Restart restarts the service with the unit that serves, rendering nothing (the
	// daemon's restart rung: the profile it runs, as it last passed its gate).
	Restart(ctx context.Context, env *Env) error
	// Failed reports whether the service has failed (stopped and not coming back), with its
	// last log lines, so that a readiness wait can end at once.
	Failed(ctx context.Context) (failed bool, lastLines string, err error)
	// Switch returns the switch of the service to profiles (in order; "" for a service
	// without profiles): its manager, its unit, the rendered candidates, the replaced units
	// in use and the checks before a candidate starts. The caller sets the gate and the
	// hooks, runs it, and hands the result to Switched.
	Switch(ctx context.Context, env *Env, profiles []string) (*switchover.Switch, error)
	// Switched records what a switch left serving: the winner, to be tried first next time,
	// or the profile of what was restored.
	Switched(ctx context.Context, env *Env, res *switchover.Result) error
}

// ModelServer is a service step that knows the model its server serves under the active
// profile: the name /v1/models lists (--served-model-name, else the model path, as SGLang
// defaults it) and the model path /get_model_info reports. The gate checks that the server
// it judges says the same; the node's telemetry labels it.
type ModelServer interface {
	ServedModel(env *Env) (name, path string, err error)
}

// ServerReader is a service step that reads the server it runs from its own unit (the
// unit a restart starts): the served model name, the model path and where it listens
// (switchover.Identify), so that a gate between switches judges that server where it
// listens rather than whatever answers at the recipe's gate URL.
type ServerReader interface {
	Serving(ctx context.Context, env *Env) (switchover.Server, error)
}

// RestartCounter is a service step whose service manager counts the restarts of its server
// after it died (the exec supervisor); ok is false when the manager does not count them.
type RestartCounter interface {
	ServerRestarts() (n int, ok bool)
}

// DeathTeller is a service step whose service manager keeps how its server's process last
// ended by itself (the exec supervisor): the unit, and ok false when it has not.
type DeathTeller interface {
	ServerExit() (unit string, x service.Exit, ok bool)
}

// KnownBadChecker is a step that checks what it would run against the known-bad table
// (the service step: its environment's packages, the GPUs and each candidate's launch
// line). The error wraps exitcode.ErrHost and names the row, its reason and its fix.
type KnownBadChecker interface {
	KnownBad(env *Env) error
}

// CommandInstaller is a step that puts commands on the PATH (the packages kind): the
// preflight excuses a required command such a step installs.
type CommandInstaller interface {
	// Installs returns the commands that running the step now would put on the PATH.
	Installs(ctx context.Context, env *Env) ([]string, error)
	// Provides returns every command the step may install (when Installs cannot tell).
	Provides() []string
}

// CommandChecker is a step that checks the recipe's requires.commands once it has
// installed them: a command it installs is excused before the run, and checked after it.
type CommandChecker interface {
	CheckCommands(required recipe.CommandRequirements, look hostcmd.Looker)
}

// SourcePinner is implemented by a step that fetches a source tree pinned to a commit (the
// source kind), so that what reports on the node (node_info's SGLang commit) asks it
// rather than reading the recipe by kind name.
type SourcePinner interface {
	Step
	// SourcePin returns the source's URL as the recipe gives it and the commit it pins
	// ("" when it names none).
	SourcePin() (url, commit string)
}
