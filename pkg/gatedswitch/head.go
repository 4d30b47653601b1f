package gatedswitch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gatespec"
	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/multinode"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// AwaitHead returns the wait of a worker's switch before its candidate starts (nil when
// env's node is no worker): the workers of a group follow its head. Restarting this
// node's server breaks the group the head serves, so the candidate starts only once the
// head runs its command line: the head's /server_info names the candidate's
// arguments (multinode.Differences finds none; the head switched first), or the head's
// server starts again (its API refuses connections while its rendezvous accepts them: it
// waits there for its ranks, as a head that switches at the same time does), so that the
// candidate joins the head's new server rather than break it later, or the head's group
// does not serve (its API answers 5xx: a rank is gone, nothing serves to break, and the
// head's ladder restarts the group once this node's server starts again); the candidate's gate
// then checks the head's command line once the group serves, and restores this node when
// it is another. The wait is bounded by the gate's ready timeout and logged every 15 s;
// a head that serves other arguments all along fails the candidate, this node's server
// left as it was. poll is how often it asks.
func AwaitHead(env *engine.Env, poll time.Duration) func(ctx context.Context, cfg gate.Config, srv switchover.Server) error {
	n := env.Nodes
	if n == nil || n.IsHead() {
		return nil
	}
	return func(ctx context.Context, cfg gate.Config, srv switchover.Server) error {
		head, err := gatespec.HeadURL(cfg.URL, n)
		if err != nil {
			return err
		}
		timeout := cfg.ReadyTimeout
		if timeout <= 0 {
			timeout = gate.DefaultReadyTimeout
		}
		client := &http.Client{Timeout: 5 * time.Second}
		start := time.Now()
		deadline, nextLog := start.Add(timeout), start
		last := ""
		var status *multinode.StatusError
		for {
			info, err := multinode.ServerInfo(ctx, client, head)
			switch {
			case err == nil:
				d := multinode.Differences(info, srv.Args)
				if len(d) == 0 {
					env.Log.Info("group: the head runs this node's launch; starting this node's candidate", "rank", n.Rank, "head", gate.RedactURL(head))
					return nil
				}
				last = "it runs other arguments (" + strings.Join(d, "; ") + ")"
			case errors.Is(err, syscall.ECONNREFUSED) && rendezvousAccepts(ctx, n.Head()):
				env.Log.Info("group: the head's server starts again and waits at the rendezvous; this node's candidate joins it, and its gate checks the head's launch once the group serves",
					"rank", n.Rank, "rendezvous", n.Head())
				return nil
			case errors.As(err, &status) && status.Code >= 500:
				// Its group does not serve (a rank is gone): nothing serves to break, and
				// only a restart of the group mends it, which the head's ladder does once
				// this node's server starts again.
				env.Log.Info("group: the head's group does not serve; this node's candidate starts and joins it when the head's ladder restarts the group, and its gate checks the head's launch once the group serves",
					"rank", n.Rank, "head", gate.RedactURL(head), "status", status.Code)
				return nil
			default:
				last = "its API does not answer (" + gate.RedactErr(err) + ")"
			}
			now := time.Now()
			if !now.Before(deadline) {
				return fmt.Errorf("%w: the head %s does not run this launch: apply the change on the head (rank 0) first or at the same time (waited %s; %s); this node's server was left as it was",
					exitcode.ErrGate, n.HeadHost, timeout, last)
			}
			if !now.Before(nextLog) {
				env.Log.Info("group: waiting for the head to run this node's launch before this node's server restarts", "rank", n.Rank,
					"head", gate.RedactURL(head), "seconds", logval.Seconds(now.Sub(start)), "timeout_seconds", logval.Seconds(timeout), "last", last)
				nextLog = now.Add(15 * time.Second)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for the head to run this node's launch: %w", ctx.Err())
			case <-time.After(min(poll, time.Until(deadline)+time.Millisecond)):
			}
		}
	}
}

// rendezvousAccepts reports whether a TCP connection to the rendezvous is accepted within
// 2 s (the connection is closed at once, nothing sent).
func rendezvousAccepts(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// headLeaves waits, until deadline, for the head's server to leave the launch args (this
// node's server's arguments) while its group failed the gate: its API refusing
// connections (its server starts again) or naming other arguments. It returns what it
// saw, or "" at once when the head does not serve args now, at the deadline, or when ctx
// ends.
func headLeaves(ctx context.Context, env *engine.Env, head string, args []string, deadline time.Time) string {
	if len(args) == 0 {
		return ""
	}
	client := &http.Client{Timeout: 5 * time.Second}
	first := true
	for time.Now().Before(deadline) {
		info, err := multinode.ServerInfo(ctx, client, head)
		serves := err == nil && len(multinode.Differences(info, args)) == 0
		switch {
		case first && !serves:
			// The head does not serve this launch now: nothing to wait for.
			return ""
		case err == nil && !serves:
			return "the head now runs other arguments (" + strings.Join(multinode.Differences(info, args), "; ") + "): its switch failed and it restored what served before"
		case errors.Is(err, syscall.ECONNREFUSED):
			return "the head's server started again (its switch failed and restores what served before, or it tries another profile)"
		}
		if first {
			env.Log.Info("group: the group failed the gate while the head runs this launch; waiting for the head's switch to decide (this node follows the head)", "head", gate.RedactURL(head))
			first = false
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(min(time.Second, time.Until(deadline)+time.Millisecond)):
		}
	}
	return ""
}
