package node

import (
	"context"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// writeTextfile writes to path the node_exporter textfile of one run of recipe r (n's,
// loaded) without the daemon: the run's outcome (rep may be nil when the run was refused
// before it was recorded, err is the run's error) and the node's info (Info).
func (n *Recipe) writeTextfile(ctx context.Context, r *recipe.Recipe, path string, rep *engine.Report, err error) error {
	m := daemon.NewApplyMetrics()
	m.ObserveApply(r.Name, rep, err)
	m.SetNodeInfo(n.Info(ctx, r))
	return m.WriteTextfile(path)
}
