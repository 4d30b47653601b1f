package node

import (
	"context"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/hostcmd"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// CheckCommands checks the commands recipe r requires, with those the steps of e install
// counted as provided, found by look; it returns the verdict and the ways the host falls
// short, and gives e the commands to find them with. Under root (not "" or "/") the recipe
// is rendered for another node: its commands are that node's business, listed as
// unchecked (with what this host has), never refused here.
func CheckCommands(ctx context.Context, e *engine.Engine, r *recipe.Recipe, root string, look hostcmd.PathLooker) ([]hostcmd.Result, []string) {
	if len(r.Commands) == 0 {
		return nil, nil
	}
	res := hostcmd.Check(ctx, r.Commands, e.ProvidedCommands(ctx), look)
	if root != "" && root != "/" {
		return hostcmd.MarkUnchecked(res, "--root renders for another node, whose own PATH decides"), nil
	}
	e.GiveCommands(r.Commands, look)
	return res, hostcmd.Problems(res)
}
