package node

import (
	"context"
	"errors"
	"fmt"
	"io"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/console"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fitness"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/refusal"
)

// Host is what building an engine found of the host besides the engine: the verdict on
// the recipe's required commands, the ways the host falls short, and the facts.
type Host struct {
	// Commands is the verdict on the recipe's required commands.
	Commands []hostcmd.Result
	// Short are the ways the host falls short of the recipe (the GPU requirements, NVML,
	// the commands), before the fitness checks.
	Short []refusal.Reason
	// Facts are the host's GPU facts the engine was built with (nil when the recipe needs
	// none).
	Facts *gpu.Facts
}

// Built is what BuildEngine made: the engine (nil with Err when it could not be built), its
// recipe, and what it found of the host.
type Built struct {
	Engine *engine.Engine
	Recipe *recipe.Recipe
	Host   Host
	Err    error
	// stderr is where the fitness checks' warnings go.
	stderr   io.Writer
	stateDir string
}

// Engine builds the recipe's engine as an apply does (the host checked; a host that falls
// short is an error), with mod applied to its options (nil: none), logging nowhere.
func (n *Recipe) Engine(ctx context.Context, mod func(*engine.Options)) (*engine.Engine, error) {
	b, err := n.BuildEngine(ctx, nil, mod, true)
	if err != nil {
		return nil, err
	}
	return b.Refuse()
}

// newEngine loads the recipe (unless r is given) and the facts and builds the engine that
// logs to stderr; a host that falls short is an exit-4 error listing every problem.
func (n *Recipe) newEngine(ctx context.Context, r *recipe.Recipe, mod func(*engine.Options)) (*engine.Engine, error) {
	b, err := n.BuildEngine(ctx, r, mod, false)
	if err != nil {
		return nil, err
	}
	return b.Refuse()
}

// BuildEngine loads the recipe (unless r is given) and the facts and builds the engine,
// logging and drawing progress on Deps.Stderr (nowhere when quiet); the ways the host falls short come back beside
// it, for the caller to refuse (Built.Refuse) or to show (a plan shows what an apply would
// do). Its error is one that stops before the engine: the recipe, the facts, the cache.
func (n *Recipe) BuildEngine(ctx context.Context, r *recipe.Recipe, mod func(*engine.Options), quiet bool) (Built, error) {
	d := n.deps()
	stderr := d.stderr()
	if quiet {
		stderr = io.Discard
	}
	if r == nil {
		var err error
		if r, err = n.Load(); err != nil {
			return Built{}, err
		}
	}
	facts, problems, err := HostFacts(ctx, r, d.Registry, d.Facts)
	if err != nil {
		if !errors.Is(err, exitcode.ErrHost) || errors.Is(err, exitcode.ErrReboot) {
			return Built{}, err
		}
		// The GPUs cannot be read (no NVML): that is one problem, and the others that
		// can still be checked (the commands, the steps' preflights) are listed with it.
		for _, rs := range refusal.Collect(err) {
			problems = append(problems, refusal.Reason{Code: refusal.NVML, Message: rs.Message})
		}
		facts = nil
	}
	newLogger := n.newLogger()
	opts, err := n.Options(ctx, r, facts, newLogger(stderr))
	if err != nil {
		return Built{}, err
	}
	opts.NewLogger = newLogger
	if d.Journal {
		opts.NewLogger = func(w io.Writer) *log.Logger { return newLogger(w).With("recipe", r.Name) }
	}
	opts.Console = console.New(stderr) // shared by the steps' logs and progress bars
	opts.IsTerminal = d.Terminal && !quiet
	if mod != nil {
		mod(&opts)
	}
	e, engErr := d.engine(opts)
	// The commands are checked with the GPUs, before any step runs, so that every problem
	// is listed at once; a command a packages step installs is not required yet.
	host := Host{Facts: facts}
	var cmdProblems []string
	host.Commands, cmdProblems = CheckCommands(ctx, e, r, n.Root, d.look())
	host.Short = append(problems, refusal.Of(refusal.Command, cmdProblems)...)
	return Built{Engine: e, Recipe: r, Host: host, Err: engErr, stderr: stderr, stateDir: n.StateDir}, nil
}

// Refuse hands back b's engine when the host meets the recipe (the GPU requirements, the
// commands, the host fitness checks) and the engine was built; else it closes the engine
// and returns the exit-4 error listing every problem, or the engine's error.
func (b Built) Refuse() (*engine.Engine, error) {
	problems := append(append([]refusal.Reason(nil), b.Host.Short...), refusal.Of(refusal.HostFitness, b.fitnessProblems())...)
	if len(problems) > 0 {
		if b.Engine != nil {
			b.Engine.Close()
		}
		return nil, HostProblems(problems)
	}
	if b.Err != nil {
		return nil, b.Err
	}
	return b.Engine, nil
}

// fitnessProblems runs the host-fitness checks for the recipe's service on the detected
// GPUs: the refusals join the preflight's problems (exit 4, every one at once); warnings
// and what could not be checked are written on stderr and do not stop the run.
func (b Built) fitnessProblems() []string {
	facts := b.Host.Facts
	if facts == nil || len(facts.GPUs) == 0 {
		return nil
	}
	w := b.stderr
	if w == nil {
		w = io.Discard
	}
	res := fitness.Check(facts, b.Recipe.Requires.GPU, FitnessOptions(b.Engine, b.Recipe, b.stateDir))
	for _, p := range res.Warnings {
		fmt.Fprintf(w, "warning: host fitness (requires.gpu.%s: warn): %s\n", p.Check, p)
	}
	var out []string
	for _, p := range res.Refusals {
		out = append(out, p.String())
	}
	if len(out) > 0 {
		for _, u := range res.Unchecked {
			fmt.Fprintf(w, "note: host fitness unchecked: %s\n", u)
		}
	}
	return out
}
