package gatedswitch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gatespec"
	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// groupRoute is a service step that names the route this node reaches its group's head
// by, for messages.
type groupRoute interface {
	GroupRoute(env *engine.Env) string
}

// WorkerGate is the gate of a switch on a worker node outside the smoke step (the
// daemon's ladder: a worker following its head's profile), as the smoke step judges a
// worker (WorkerGateWith): through the head, with its own server's part of the join and
// the check that the head runs its command line. nil when env's node is no worker (the
// plain gate).
func WorkerGate(env *engine.Env, svc engine.ServiceStep) func(ctx context.Context, cfg gate.Config, srv switchover.Server) (*gate.Result, error) {
	return WorkerGateWith(env, svc, func(ctx context.Context, cfg gate.Config, _ string) (*gate.Result, error) {
		return gate.Run(ctx, cfg)
	})
}

// WorkerGateWith returns the gate of a worker node of a multi-node group (nil when env's
// node is no worker), run running each gate (the smoke step's logs and records it): the
// switch starts this node's server, and the gate asks the head, since a worker's own
// health server answers 200 whatever the group does. It passes when the head's server
// passes the recipe's gate (bounded by the group's join timeout) and runs the arguments
// of the unit judged (sameLaunch), this node's server still runs and its own /health
// answers (SGLang opens it only once the node's schedulers are up in the group). A
// failure is an error naming the rendezvous and the likely cause; the switch then
// restores what served before.
func WorkerGateWith(env *engine.Env, svc engine.ServiceStep, run func(ctx context.Context, cfg gate.Config, profile string) (*gate.Result, error)) func(ctx context.Context, cfg gate.Config, srv switchover.Server) (*gate.Result, error) {
	n := env.Nodes
	if n == nil || n.IsHead() {
		return nil
	}
	route := "the interface plan names"
	if g, ok := svc.(groupRoute); ok {
		route = g.GroupRoute(env)
	}
	return func(ctx context.Context, cfg gate.Config, srv switchover.Server) (*gate.Result, error) {
		profile := srv.Profile
		own := cfg.URL
		head, err := gatespec.HeadURL(cfg.URL, n)
		if err != nil {
			return nil, err
		}
		cfg.URL = head
		if n.JoinTimeout > 0 {
			cfg.ReadyTimeout = n.JoinTimeout
		}
		env.Log.Info("waiting for the group", "rank", n.Rank, "nodes", n.Count, "rendezvous", n.Head(), "head", head)
		start := time.Now()
		res, err := run(ctx, cfg, profile)
		if err != nil {
			return nil, err
		}
		env.Detail("group", map[string]any{"rank": n.Rank, "nodes": n.Count, "rendezvous": n.Head(), "head": head, "served": res.Pass})
		if !res.Pass {
			// A head that serves other arguments is not this server's group.
			if err := sameLaunch(ctx, env, head, srv.Args, cfg.RequestTimeout); err != nil {
				return nil, fmt.Errorf("%w: node rank %d: %w", exitcode.ErrGate, n.Rank, err)
			}
			// The head's own gate judges the group's launch: while the head runs this
			// launch its switch decides, and this node follows it. It fails once the head
			// leaves it (restores what served before), so that this node's restored server
			// meets the head's at the rendezvous, rather than break the group under the
			// head's gate.
			wait := cfg.ReadyTimeout
			if wait <= 0 {
				wait = gate.DefaultReadyTimeout
			}
			if left := headLeaves(ctx, env, head, srv.Args, start.Add(wait)); left != "" {
				return nil, fmt.Errorf("%w: node rank %d: the group failed the gate (%s) and %s", exitcode.ErrGate, n.Rank, res.Summary(), left)
			}
			g := multinode.Group{Count: n.Count, Rank: n.Rank, HeadHost: n.HeadHost, HeadPort: n.HeadPort,
				DPAttention: slices.Contains(srv.Args, "--enable-dp-attention")}
			return nil, fmt.Errorf("%w: node rank %d of %d: the group does not serve: the head's server at %s did not pass the gate (%s); "+
				"this node's server joins at the rendezvous %s through %s; %s. Likely causes: the head not started or failing its own gate, "+
				"the head's %s closed or blocked by a firewall, the ports NCCL and Gloo connect on blocked between the nodes (%s), "+
				"or the wrong interface (see plan's group lines)",
				exitcode.ErrGate, n.Rank, n.Count, gate.RedactURL(head), res.Summary(), n.Head(), route, probeRendezvous(ctx, n.Head()),
				g.HeadPortsText(), multinode.EphemeralPorts(""))
		}
		// One group runs one command line: a head that runs other arguments (it has not
		// switched to this change, or its switch failed and it restored what served
		// before) is not this candidate's group, and the switch restores this node too.
		if err := sameLaunch(ctx, env, head, srv.Args, cfg.RequestTimeout); err != nil {
			return nil, fmt.Errorf("%w: node rank %d: %w", exitcode.ErrGate, n.Rank, err)
		}
		// The head serving says the group joined only while this node's server still runs.
		if failed, lines, err := cfg.Failed(ctx); err != nil || failed {
			if err != nil {
				return nil, fmt.Errorf("asking whether %s runs: %w", svc.ServiceName(), err)
			}
			return nil, fmt.Errorf("%w: node rank %d: this node's server %s is not running, so it has not joined the group at %s: %s",
				exitcode.ErrGate, n.Rank, svc.ServiceName(), n.Head(), lines)
		}
		// SGLang opens a worker's health server only once its schedulers are up in the group:
		// its answering is this node's part of the join (the head's serving is the group's).
		if err := ownHealth(ctx, own, cfg.RequestTimeout); err != nil {
			return nil, fmt.Errorf("%w: node rank %d: the head serves, but this node's server has not joined the group at %s: %v "+
				"(SGLang opens a worker's /health only once its schedulers are up in the group)", exitcode.ErrGate, n.Rank, n.Head(), err)
		}
		return res, nil
	}
}

// HeadCandidate returns the one profile of candidates a worker runs: the head's, read from
// its /server_info (multinode.ProfileOf) when the head serves now, else the first
// (the group's first candidate, which a head coming up with it tries first too).
func HeadCandidate(ctx context.Context, env *engine.Env, url string, candidates []string) []string {
	first := candidates[:1]
	if len(candidates) < 2 || env.Nodes == nil {
		return first
	}
	head, err := gatespec.HeadURL(url, env.Nodes)
	if err != nil {
		return first
	}
	info, err := multinode.ServerInfo(ctx, &http.Client{Timeout: 5 * time.Second}, head)
	if err != nil {
		return first
	}
	args := map[string][]string{}
	for _, c := range candidates {
		args[c] = env.Profiles[c].Args
	}
	if p := multinode.ProfileOf(info, candidates, args); p != "" {
		if p != first[0] {
			env.Log.Info("the head runs another profile than the first candidate; this worker runs the head's", "profile", p, "first", first[0])
		}
		return []string{p}
	}
	return first
}

// sameLaunch checks that the head's server runs args, this node's server's arguments (its
// unit's ExecStart=), from the head's /server_info (multinode.Differences). A head
// whose server info cannot be read is logged and not judged (a server that is not SGLang,
// a proxy).
func sameLaunch(ctx context.Context, env *engine.Env, head string, args []string, timeout time.Duration) error {
	if len(args) == 0 {
		return nil
	}
	if timeout <= 0 || timeout > 10*time.Second {
		timeout = 10 * time.Second
	}
	info, err := multinode.ServerInfo(ctx, &http.Client{Timeout: timeout}, head)
	if err != nil {
		env.Log.Warn("the head's arguments cannot be read; not compared with this node's", "head", gate.RedactURL(head), "err", gate.RedactErr(err))
		return nil
	}
	if d := multinode.Differences(info, args); len(d) > 0 {
		return fmt.Errorf("the head at %s runs other arguments than this node's server (%s): every rank of a group runs one command line; "+
			"the head has not applied this change yet, or its own switch failed and it restored what served before", gate.RedactURL(head), strings.Join(d, "; "))
	}
	return nil
}

// probeRendezvous says what a TCP connection to the rendezvous finds (within 3 s), which
// narrows down why a worker did not join: nothing listening, a firewall that drops, no
// route, or a head that runs but did not take this node in.
func probeRendezvous(ctx context.Context, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	switch {
	case err == nil:
		c.Close()
		return fmt.Sprintf("the rendezvous %s accepts connections now: the head runs, and serves only once every rank has joined, so this node's server did not join it", addr)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens at the rendezvous %s now (connection refused): the head's server is not running there", addr)
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return fmt.Sprintf("the rendezvous %s is unreachable from this node (%v): the route or the interface is wrong", addr, err)
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return fmt.Sprintf("the rendezvous %s does not answer within 3s: a firewall drops the connection, or the route is wrong", addr)
	}
	return fmt.Sprintf("connecting to the rendezvous %s: %v", addr, err)
}

// ownHealth asks this node's own server's /health once, bounded by timeout (default 10 s)
// and 64 KiB of body: 200 says its schedulers are up, nothing more.
func ownHealth(ctx context.Context, base string, timeout time.Duration) error {
	if timeout <= 0 || timeout > 10*time.Second {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := strings.TrimRight(base, "/") + "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("asking its /health: %s", gate.RedactErr(err))
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return fmt.Errorf("its /health at %s does not answer: %s", gate.RedactURL(u), gate.RedactErr(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("its /health at %s answers HTTP %d", gate.RedactURL(u), resp.StatusCode)
	}
	return nil
}
