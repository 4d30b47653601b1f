package systemd

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/portowner"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/sglargs"
)

// groupOf returns the multi-node group of the run's recipe; ok is false for a single node.
func groupOf(env *engine.Env) (multinode.Group, bool) {
	n := env.Nodes
	if n == nil {
		return multinode.Group{}, false
	}
	return multinode.Group{Count: n.Count, Rank: n.Rank, HeadHost: n.HeadHost, HeadPort: n.HeadPort,
		Interface: n.Interface}, true
}

// group returns the multi-node group of the run's recipe as profile's launch line runs it
// (DP attention opens more ports on the head); ok is false for a single node.
func (s *Step) group(env *engine.Env, profile string) (multinode.Group, bool) {
	g, ok := groupOf(env)
	if ok {
		g.DPAttention = hasFlag(s.lineArgs(env, profile), "--enable-dp-attention")
	}
	return g, ok
}

// lineArgs returns the arguments the recipe gives the server for profile: the profile's,
// then the step's.
func (s *Step) lineArgs(env *engine.Env, profile string) []string {
	var out []string
	if p, ok := env.Profiles[profile]; ok {
		out = append(out, p.Args...)
	}
	return append(out, s.spec.Args...)
}

// portClash returns the error of a group whose head's ports take the server's API port:
// the rendezvous port equal to it, or, with DP attention, one of the six above the
// rendezvous (exit 2: the recipe's fault, on every host).
func portClash(g multinode.Group, apiPort int) error {
	for _, p := range g.HeadPorts() {
		if p != apiPort {
			continue
		}
		what := "the rendezvous port"
		if p != g.HeadPort {
			what = fmt.Sprintf("port %d, which the head's DP attention opens (%s)", p, g.HeadPortsText())
		}
		return fmt.Errorf("%w: nodes.head %s: %s is the server's API port (--port %d): the head's server would listen on it twice; give nodes.head another port (or the server another --port)",
			exitcode.ErrUsage, g.Head(), what, apiPort)
	}
	return nil
}

// hostGroupFacts reads this node's route to the head, its link and RDMA devices from the
// host (the network namespace sglprov runs in), bounded in time.
func hostGroupFacts(_ *engine.Env, g multinode.Group) multinode.Facts {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return multinode.Host{}.Inspect(ctx, g)
}

// groupDecision derives the group environment (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME,
// never NCCL_IB_DISABLE=1 beside an active RDMA device) from this node's facts and the
// recipe's own environment for profile; zero for a single node.
func (s *Step) groupDecision(env *engine.Env, profile string) multinode.Decision {
	g, ok := s.group(env, profile)
	if !ok {
		return multinode.Decision{}
	}
	return multinode.Derive(s.groupFacts(env, g), s.ownEnv(env, profile))
}

// groupFlags are the flags the nodes block sets on every node's command line (each in
// every spelling sglargs.Table knows: --dist-init-addr is also --nccl-init-addr).
var groupFlags = []string{"--nnodes", "--node-rank", "--dist-init-addr"}

// groupArgs adds SGLang's multi-node flags to d: --nnodes, --node-rank, --dist-init-addr
// from the recipe's nodes block, and --tp (nodes.tp, else nodes × this node's GPUs) and
// --pp-size unless the arguments set them. A node with fewer GPUs than its share of
// tp × pp is refused (exit 4).
func groupArgs(env *engine.Env, d *service.Data, all []string) error {
	n := env.Nodes
	if n == nil {
		return nil
	}
	for _, f := range groupFlags {
		for _, name := range sglargs.Spellings(f) {
			if hasFlag(all, name) {
				return fmt.Errorf("%w: args set %s, which the recipe's nodes block sets on each node: drop it from args", exitcode.ErrUsage, name)
			}
		}
	}
	g, _ := groupOf(env)
	g.DPAttention = hasFlag(all, "--enable-dp-attention")
	if err := portClash(g, d.Port); err != nil {
		return err
	}
	d.Args = append(d.Args, "--nnodes", strconv.Itoa(n.Count), "--node-rank", strconv.Itoa(n.Rank),
		"--dist-init-addr", n.Head())
	pp := max(n.PP, 1)
	if v, ok := flagValue(all, sglargs.Spellings("--pp-size")...); ok {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 {
			return fmt.Errorf("%w: --pp-size %q is not a whole number above 0", exitcode.ErrUsage, v)
		}
		pp = p
	} else if n.PP > 1 {
		d.Args = append(d.Args, "--pp-size", strconv.Itoa(n.PP))
	}
	tp := n.TP
	if v, ok := flagValue(all, sglargs.Spellings("--tp-size")...); ok {
		t, err := strconv.Atoi(v)
		if err != nil || t < 1 {
			return fmt.Errorf("%w: --tp %q is not a whole number above 0", exitcode.ErrUsage, v)
		}
		if n.TP > 0 && t != n.TP {
			return fmt.Errorf("%w: args set --tp %d but nodes.tp is %d: set it in one place", exitcode.ErrUsage, t, n.TP)
		}
		tp = t
	} else {
		if tp == 0 && env.Facts.Count() > 0 {
			tp = n.Count * env.Facts.Count() / pp
		}
		if tp > 0 {
			d.Args = append(d.Args, "--tp", strconv.Itoa(tp))
		}
	}
	if tp > 0 {
		world := tp * pp
		if world%n.Count != 0 {
			return fmt.Errorf("%w: tp %d × pp %d = %d GPUs do not divide over %d nodes", exitcode.ErrUsage, tp, pp, world, n.Count)
		}
		if have := env.Facts.Count(); have > 0 && world/n.Count > have {
			return fmt.Errorf("%w: tp %d × pp %d over %d nodes needs %d GPUs on each node; this node has %d",
				exitcode.ErrHost, tp, pp, n.Count, world/n.Count, have)
		}
	}
	return nil
}

// isLoopback reports whether host names only this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkGroup is a node's preflight before its server starts: the route to the head, the
// interface and link, and on the head the ports SGLang needs for the group and an API
// address the workers can reach. A node that cannot join is refused (exit 4; a head port
// held by another process: exit 5) with the rendezvous and the cause named.
func (s *Step) checkGroup(_ context.Context, env *engine.Env, m service.Manager, profile string) error {
	g, ok := s.group(env, profile)
	if !ok || m.Kind() == service.KindOffline {
		return nil
	}
	dec := s.groupDecision(env, profile)
	if err := dec.Err(); err != nil {
		return fmt.Errorf("%w: node rank %d cannot join the group (rendezvous %s): %w", exitcode.ErrHost, g.Rank, g.Head(), err)
	}
	if g.Rank != 0 {
		return nil
	}
	d, err := s.data(env, profile)
	if err != nil {
		return err
	}
	if isLoopback(d.Host) && !isLoopback(g.HeadHost) {
		return fmt.Errorf("%w: the head's server would listen on %s, where the workers cannot ask it whether the group serves: set host: 0.0.0.0 (or %s) on the systemd step",
			exitcode.ErrUsage, d.Host, g.HeadHost)
	}
	own := s.ownListener(m)
	for _, p := range g.HeadPorts() {
		ls, err := s.lookupPort(p)
		if err != nil {
			return fmt.Errorf("checking who listens on port %d before starting the group's head: %w", p, err)
		}
		for _, l := range ls {
			if l.Conflicts(g.HeadHost) && !own(l) {
				return fmt.Errorf("%w: not starting %s: port %d, which the head needs for the group (%s at %s), is held by %s: stop it or give nodes.head another port",
					exitcode.ErrLocked, s.spec.Unit, p, g.HeadPortsText(), g.HeadHost, l)
			}
		}
	}
	return nil
}

// ownListener reports whether a listener is the unit's own server (as checkPort judges).
func (s *Step) ownListener(m service.Manager) func(portowner.Listener) bool {
	switch m.Kind() {
	case service.KindSystemd:
		return func(l portowner.Listener) bool { return l.PID != 0 && l.Unit == s.spec.Unit }
	case service.KindExec:
		self := os.Getpid()
		return func(l portowner.Listener) bool {
			return l.PID != 0 && l.PID != self && portowner.DescendsFrom(l.PID, self)
		}
	}
	return func(portowner.Listener) bool { return true }
}

// describeGroup returns plan's lines about the group: this node's rank and route to the
// head, the NCCL and Gloo settings and why, and what would keep the node from joining.
func (s *Step) describeGroup(env *engine.Env, profile string) []string {
	g, ok := s.group(env, profile)
	if !ok {
		return nil
	}
	dec := s.groupDecision(env, profile)
	var out []string
	for _, r := range dec.Reasons {
		label := "group: "
		if strings.Contains(r, "NCCL") || strings.Contains(r, "GLOO") || strings.Contains(r, "RDMA") {
			label = "group NCCL: "
		}
		out = append(out, label+r)
	}
	if g.Rank == 0 {
		var held []string
		for _, p := range g.HeadPorts() {
			ls, err := s.lookupPort(p)
			if err != nil {
				held = append(held, fmt.Sprintf("port %d: %v", p, err))
				continue
			}
			for _, l := range ls {
				if l.Conflicts(g.HeadHost) {
					held = append(held, fmt.Sprintf("port %d is held by %s", p, l))
				}
			}
		}
		if len(held) == 0 {
			out = append(out, fmt.Sprintf("group: the head's %s: free now (checked again before its server starts)", g.HeadPortsText()))
		} else {
			out = append(out, fmt.Sprintf("group: the head needs %s: %s (only this unit's own server may hold them)",
				g.HeadPortsText(), strings.Join(held, "; ")))
		}
	} else {
		out = append(out, "group: this worker's apply passes once the head's server passes the gate and this node's own /health answers (SGLang opens it once the worker joined; alone it says nothing)")
	}
	out = append(out, "group: between the nodes open the head's "+g.HeadPortsText()+"; "+multinode.EphemeralPorts(""))
	for _, p := range dec.Problems {
		out = append(out, "group problem: "+p)
	}
	return out
}

// GroupRoute names, for messages, the interface this node reaches the head through.
func (s *Step) GroupRoute(env *engine.Env) string {
	g, ok := groupOf(env)
	if !ok {
		return ""
	}
	f := s.groupFacts(env, g)
	if f.RouteErr != "" {
		return "no route (" + f.RouteErr + ")"
	}
	return fmt.Sprintf("%s (link %s, this node's address %s)", f.Link.Name, f.Link.State, f.Local)
}
