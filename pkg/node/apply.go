package node

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// ApplyOptions are an apply's choices beyond the recipe: the steps it runs alone (Only)
// or runs whatever their state (Force), a full re-check of every output (Verify), and how
// many steps run at once (Jobs; 0: the engine's default).
type ApplyOptions struct {
	Only, Force []string
	Verify      bool
	Jobs        int
}

// Apply applies the recipe under the node's lease (Lease.Take) and hands back its engine,
// not closed, when one was made: what its steps hold (an exec-managed server) lives until
// the caller closes it (the daemon keeps it in Kept). A host short of the recipe, or one
// refused before its first step, is a run too: recorded, so that status says so and exits
// with its code. The run's summary is written on Deps.Stdout.
func (n *Recipe) Apply(ctx context.Context, o ApplyOptions) (*engine.Report, *engine.Engine, error) {
	r, err := n.Load()
	if err != nil {
		return nil, nil, err
	}
	if err := engine.EnsureStateDir(n.StateDir, n.Insecure); err != nil {
		return nil, nil, err
	}
	release, err := n.TakeLease()
	if err != nil {
		return nil, nil, err
	}
	defer release()
	if l := n.Lease; l != nil && l.Lock != nil {
		// The daemon holds the node's lock; others see it applying meanwhile.
		_ = l.Lock.SetNote(engine.NoteDaemonApplying)
		defer l.Lock.SetNote(engine.NoteDaemon)
	}
	started := time.Now()
	e, err := n.newEngine(ctx, r, func(e *engine.Options) {
		e.Only, e.Force, e.Verify, e.Concurrency = o.Only, o.Force, o.Verify, o.Jobs
	})
	if err != nil {
		return n.recordRefusal(r, started, err), nil, err
	}
	rep, runErr := e.Apply(ctx)
	if rep == nil && engine.Refused(runErr) {
		// Refused before the first step (a GPU another recipe's server claims).
		rep = n.recordRefusal(r, started, runErr)
		if rep != nil {
			fmt.Fprintf(n.deps().stdout(), "\n%s: refused in %s; report: %s\n", r.Name, rep.Duration.Round(1e6), rep.Dir+string(os.PathSeparator)+"report.json")
		}
		return rep, e, runErr
	}
	n.writeSummary(r, rep)
	return rep, e, runErr
}

// writeSummary writes rep's summary (nothing when rep is nil) on Deps.Stdout.
func (n *Recipe) writeSummary(r *recipe.Recipe, rep *engine.Report) {
	if rep == nil {
		return
	}
	w := n.deps().stdout()
	fmt.Fprintf(w, "\n%s", rep.Summary())
	for _, h := range rep.Hints() {
		fmt.Fprintln(w, h)
	}
	if rep.Generation != nil {
		fmt.Fprintf(w, "\n%s\n", rep.Generation.Note)
	}
	fmt.Fprintf(w, "\n%s: %s in %s; report: %s\n", r.Name, rep.Result, rep.Duration.Round(1e6), rep.Dir+string(os.PathSeparator)+"report.json")
}

// recordRefusal records a run refused with err before any step ran (exit 4 or 6), so that
// status shows it and exits with its code; any other error is not a refusal and nil is
// returned. The caller holds the state dir's lock.
func (n *Recipe) recordRefusal(r *recipe.Recipe, started time.Time, err error) *engine.Report {
	if !engine.Refused(err) {
		return nil
	}
	rep, rerr := engine.RecordRefusal(n.StateDir, r.Name, r.File, started, err)
	if rerr != nil {
		return nil
	}
	return rep
}

// WriteRunTextfile writes the textfile of one run (path "": none) without the daemon: its
// outcome (rep may be nil when the run was refused before it was recorded) and the node's
// info. A run refused because another holds the lock writes nothing: the file is the
// holder's; nor does a recipe that does not load (the run's error says why).
func (n *Recipe) WriteRunTextfile(ctx context.Context, path string, rep *engine.Report, err error) error {
	if path == "" || exitcode.Of(err) == exitcode.ExitLocked {
		return nil
	}
	r, lerr := n.Load()
	if lerr != nil {
		return nil
	}
	return n.writeTextfile(ctx, r, path, rep, err)
}
