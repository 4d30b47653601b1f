package node

import (
	"context"
	"errors"

	"github.com/sglprov/sglprov/pkg/engine"
)

// PlanOptions are a plan's choices beyond the recipe: the steps it plans alone (Only) or as
// forced (Force).
type PlanOptions struct {
	Only, Force []string
}

// Planned is what a plan found of the node besides the plan: who holds the state dir's
// lock, the recipe's name, and whether it was refused before a plan could be made.
type Planned struct {
	// Running is the pid of the apply running now (-1: one whose pid is unknown; 0: none);
	// DaemonPid the daemon's that holds the lock (0: none).
	Running, DaemonPid int
	// Recipe is the recipe's name ("" when it did not load).
	Recipe string
	// Refused says that the host was refused before any plan was made (the error is the
	// refusal).
	Refused bool
}

// Plan plans the recipe: what an apply would do, step by step, and why, changing nothing.
// The state dir's lock is taken shared; an apply that holds it is named (Planned.Running)
// and the steps it runs now are planned as running. A host that falls short still gets its
// plan (what an apply would do once it is fixed) with the refusal as the error (exit 4);
// what the servers' environments hold now is checked against the known-bad table. The plan
// is nil when none could be made.
func (n *Recipe) Plan(ctx context.Context, o PlanOptions) (*engine.Plan, Planned, error) {
	var pd Planned
	lock, running, daemonPid, err := ReadShared(n.StateDir, n.deps().SharedLock)
	if err != nil {
		return nil, pd, err
	}
	defer lock.Release()
	pd.Running, pd.DaemonPid = running, daemonPid
	b, err := n.BuildEngine(ctx, nil, func(opts *engine.Options) {
		opts.Only, opts.Force = o.Only, o.Force
		opts.ApplyRunning = running
	}, false)
	if err != nil {
		return nil, pd, err
	}
	if b.Recipe != nil {
		pd.Recipe = b.Recipe.Name
	}
	e := b.Engine
	if len(b.Host.Short) == 0 || b.Err != nil {
		if e, err = b.Refuse(); err != nil {
			pd.Refused = engine.Refused(err)
			return nil, pd, err
		}
	}
	defer e.Close()
	p, planErr := e.Plan(ctx)
	// What the servers' environments hold now, against the known-bad table.
	planErr = errors.Join(planErr, e.KnownBad())
	if len(b.Host.Short) > 0 {
		planErr = errors.Join(HostProblems(b.Host.Short), planErr)
	}
	if p != nil {
		p.Commands = b.Host.Commands
	}
	return p, pd, planErr
}
