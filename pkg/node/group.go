package node

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sglprov/sglprov/pkg/daemon"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// daemonGroup is the daemon's view of the recipe's multi-node group (nil for a single
// node): the head reads its rendezvous port to restart after its workers, a worker reads
// the head's profile from the head's /server_info to follow it, and compares its own
// unit's launch line with the head's.
func (n *Recipe) daemonGroup(rec *recipe.Recipe, rem *Remedies) (*daemon.Group, error) {
	if rec.Nodes == nil {
		return nil, nil
	}
	data, err := rec.NewData(nil)
	if err != nil {
		return nil, fmt.Errorf("rendering the recipe's nodes block: %w", err)
	}
	nc, ok, rerr := rec.NodesConfig(data)
	if rerr != nil || !ok {
		// Values that need the host's facts: the group's order is not known here; each
		// node's ladder then restarts its own server alone.
		return nil, nil
	}
	g := &daemon.Group{Rank: nc.Rank, Count: nc.Count}
	if nc.IsHead() {
		port := nc.HeadPort
		g.Rendezvous = func(context.Context) (multinode.Rendezvous, error) { return multinode.ReadRendezvous(port) }
		return g, nil
	}
	client := &http.Client{Timeout: 10 * time.Second}
	g.HeadProfile = func(ctx context.Context) (string, error) {
		cfg, err := n.Gate(ctx, 0)
		if err != nil {
			return "", err
		}
		info, err := multinode.ServerInfo(ctx, client, cfg.URL)
		if err != nil {
			return "", err
		}
		var profile string
		err = rem.withService(ctx, func(svc engine.BoundService) error {
			cands := svc.Step.Candidates(svc.Env)
			args := map[string][]string{}
			for _, p := range cands {
				args[p] = svc.Env.Profiles[p].Args
			}
			profile = multinode.ProfileOf(info, cands, args)
			return nil
		})
		return profile, err
	}
	g.HeadLaunch = func(ctx context.Context) ([]string, error) {
		cfg, err := n.Gate(ctx, 0)
		if err != nil {
			return nil, err
		}
		info, err := multinode.ServerInfo(ctx, client, cfg.URL)
		if err != nil {
			return nil, err
		}
		var diff []string
		err = rem.withService(ctx, func(svc engine.BoundService) error {
			sr, ok := svc.Step.(engine.ServerReader)
			if !ok {
				return fmt.Errorf("the service step %s cannot say what it runs", svc.Step.ServiceName())
			}
			srv, err := sr.Serving(ctx, svc.Env)
			if err != nil {
				return fmt.Errorf("reading what %s runs: %w", svc.Step.ServiceName(), err)
			}
			diff = multinode.Differences(info, srv.Args)
			return nil
		})
		return diff, err
	}
	return g, nil
}

// UseProfile installs profile, the one the group's head runs, and gates it with the
// recipe's own readiness wait (a worker's gate asks the head): UseProfile.
func (r *Remedies) UseProfile(ctx context.Context, profile string) error {
	return r.withService(ctx, func(svc engine.BoundService) error {
		cfg, err := r.Recipe.Gate(ctx, 0)
		if err != nil {
			return err
		}
		return UseProfile(ctx, svc, profile, cfg)
	})
}
