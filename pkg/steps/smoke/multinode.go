package smoke

import (
	"context"
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/multinode"
	gate "github.com/sglprov/sglprov/pkg/smoke"
)

// groupService is a service step whose recipe spans several nodes: on a worker (rank >= 1)
// it names the head's API address, which alone says whether the group serves (a worker's
// own server answers SGLang's dummy /health, always 200), and the route the worker reaches
// the head by.
type groupService interface {
	GroupHeadURL(env *engine.Env) (url string, ok bool, err error)
	GroupRoute(env *engine.Env) string
}

// joinGroup is a worker's gate: its own server must keep running (a server that dies ends
// the wait with its last lines) and the head's server must pass the gate's cases, asked
// at the head's address, within nodes.join_timeout. That is the group serving: SGLang's
// head answers only once every rank has joined. It reports false when env's node is no
// worker of a group.
func (s *Step) joinGroup(ctx context.Context, env *engine.Env, cfg gate.Config, svc engine.ServiceStep) (bool, error) {
	g, ok := svc.(groupService)
	if !ok || env.Nodes == nil || env.Nodes.IsHead() {
		return false, nil
	}
	head, ok, err := g.GroupHeadURL(env)
	if err != nil || !ok {
		return ok, err
	}
	n := env.Nodes
	cfg.URL = head
	cfg.Failed = svc.Failed
	if n.JoinTimeout > 0 {
		cfg.ReadyTimeout = n.JoinTimeout
	}
	if served, ok := svc.(servedModel); ok {
		name, path, err := served.ServedModel(env)
		if err != nil {
			return true, fmt.Errorf("reading the model %s serves: %w", svc.ServiceName(), err)
		}
		cfg.ServedModel, cfg.ModelPath = name, path
	}
	env.Log.Info("waiting for the group", "rank", n.Rank, "nodes", n.Count, "rendezvous", n.Head(), "head", head)
	res, err := s.gate(ctx, env, cfg, "")
	if err != nil {
		return true, err
	}
	env.Detail("group", map[string]any{"rank": n.Rank, "nodes": n.Count, "rendezvous": n.Head(), "head": head, "served": res.Pass})
	if !res.Pass {
		return true, fmt.Errorf("%w: node rank %d of %d: the group does not serve: the head's server at %s did not pass the gate (%s); "+
			"this node's server joins at the rendezvous %s through %s. Likely causes: the head not started or failing its own gate, "+
			"the rendezvous port %d (and the %d above it) closed or blocked by a firewall on the head, or the wrong interface (see plan's group lines)",
			engine.ErrGate, n.Rank, n.Count, head, res.Summary(), n.Head(), g.GroupRoute(env), n.HeadPort, multinode.HeadPortSpan)
	}
	// The head serving says the group joined only while this node's server still runs.
	if failed, lines, err := svc.Failed(ctx); err != nil || failed {
		if err != nil {
			return true, fmt.Errorf("asking whether %s runs: %w", svc.ServiceName(), err)
		}
		return true, fmt.Errorf("%w: node rank %d: this node's server %s is not running, so it has not joined the group at %s: %s",
			engine.ErrGate, n.Rank, svc.ServiceName(), n.Head(), lines)
	}
	if err := svc.Won(ctx, env, svc.Active(env)); err != nil {
		return true, fmt.Errorf("keeping the unit of a node that joined: %w", err)
	}
	return true, nil
}
