package cli

import (
	"context"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// Telemetry without the daemon: a one-shot apply (cloud-init) and a refused plan write the
// node_exporter textfile the daemon writes at every cycle, so that a node no daemon
// watches still shows up in the fleet's Prometheus.

// writeRunTextfile writes the textfile of one run of c's recipe: its outcome (rep may be
// nil when the run was refused before it was recorded) and the node's info. A run refused
// because another holds the lock writes nothing: the file is the holder's.
func writeRunTextfile(ctx context.Context, stdio IO, c *recipeFlags, path string, rep *engine.Report, err error) error {
	if path == "" || exitcode.Of(err) == exitcode.ExitLocked {
		return nil
	}
	r, lerr := c.loadRecipe(stdio)
	if lerr != nil {
		return nil // a recipe that does not load has no node to describe: the error says why
	}
	return c.node(stdio, nil, nil).WriteRunTextfile(ctx, r, path, rep, err)
}

// recordRefusal records a run refused with err before any step ran (exit 4 or 6), so that
// status shows it and exits with its code; any other error is not a refusal and nil is
// returned. The caller holds the state dir's lock.
func recordRefusal(c *recipeFlags, r *recipe.Recipe, started time.Time, err error) *engine.Report {
	if !engine.Refused(err) {
		return nil
	}
	rep, rerr := engine.RecordRefusal(c.stateDirPath(), r.Name, r.File, started, err)
	if rerr != nil {
		return nil
	}
	return rep
}
