package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/sglprov/sglprov/pkg/logval"
	"github.com/sglprov/sglprov/pkg/multinode"
)

// Group is a node's place in a group of nodes that serve one model together (SGLang's
// --nnodes): the daemon on each node runs the same ladder, and the group is restarted in
// order, the workers first, then the head.
//
// No rank talks to another's daemon. A worker's canary asks the head (its own server's
// health says nothing), so a dead rank fails every node's canary. A worker's restart
// rung restarts its own server at once: its new server waits at the head's rendezvous.
// The head's restart rung first waits, bounded by RejoinTimeout, until every worker has
// started again, which it reads from its own kernel: each rank's processes hold a
// connection to the rendezvous (torch's TCPStore at --dist-init-addr) for as long as they
// run, so a worker whose old server is gone and whose new one knocks shows as a new
// connection from its address and none of its old ones (multinode.Rejoined). Then the head
// restarts, its new server takes the waiting workers in, and every canary passes again.
type Group struct {
	// Rank and Count are this node's rank (0: the head) and the group's size.
	Rank, Count int
	// Rendezvous reads the head's rendezvous port (the head only; nil: the head does not
	// wait for its workers).
	Rendezvous func(ctx context.Context) (multinode.Rendezvous, error)
	// RejoinTimeout bounds the head's wait for its workers before it restarts anyway
	// (default: the longer of the canary timeout and FailuresBeforeRestart+2 intervals,
	// the time a worker's daemon, run with the same flags, takes to see the group down
	// and restart its server).
	RejoinTimeout time.Duration
	// Poll is how often the head reads the rendezvous while it waits (default 1 s).
	Poll time.Duration
	// HeadProfile returns the profile the head's server runs, as the worker reads it from
	// the head ("" when it cannot tell); nil: the worker does not follow the head. A
	// worker's next-profile rung is skipped either way: a rank that changes profile alone
	// breaks the group (every rank must run the same arguments).
	HeadProfile func(ctx context.Context) (string, error)
	// HeadLaunch compares this worker's launch line (the arguments of the unit it runs)
	// with what the head's server reports it runs: the flags it runs otherwise
	// (multinode.Differences), none when the group runs one launch line; an error when
	// the head cannot say (its group does not serve). nil: the worker does not compare.
	HeadLaunch func(ctx context.Context) ([]string, error)
	// Settle is how long a worker sees the head run another launch line before it follows
	// it (default RejoinTimeout): a head whose switch is still being judged may restore
	// what served before, and a worker that restarts meanwhile breaks the group under
	// the head's gate.
	Settle time.Duration
}

// IsHead reports whether this node is the group's head (rank 0).
func (g *Group) IsHead() bool { return g == nil || g.Rank == 0 }

func (o *Options) groupDefaults() {
	if o.Group == nil {
		return
	}
	g := *o.Group // the caller's stays as given
	o.Group = &g
	if g.RejoinTimeout <= 0 {
		g.RejoinTimeout = max(o.CanaryTimeout, time.Duration(o.FailuresBeforeRestart+2)*o.Interval)
	}
	if g.Poll <= 0 {
		g.Poll = time.Second
	}
	if g.Settle <= 0 {
		g.Settle = g.RejoinTimeout
	}
}

// noteWhole records, on the head, the rendezvous of a group that serves (its gate just
// passed): the connections a later restart waits to see replaced.
func (d *Loop) noteWhole(ctx context.Context) {
	g := d.o.Group
	if g == nil || g.Rank != 0 || g.Rendezvous == nil {
		return
	}
	rv, err := g.Rendezvous(ctx)
	if err != nil || !rv.Listening {
		d.whole = nil
		return
	}
	d.whole = &rv
}

// awaitWorkers is the head's part of a group restart: before it restarts its own server, it
// waits until every worker has started again (or its server no longer holds the
// rendezvous: nothing then holds the workers' old servers, and its new one waits for them
// itself), bounded by RejoinTimeout. It returns what it found, for the log.
func (d *Loop) awaitWorkers(ctx context.Context) string {
	g := d.o.Group
	if g == nil || g.Rank != 0 || g.Rendezvous == nil || g.Count < 2 {
		return ""
	}
	workers := g.Count - 1
	now, err := g.Rendezvous(ctx)
	if err != nil {
		d.o.Log.Warn("group: reading the rendezvous; restarting the head without waiting for the workers", "err", err)
		return "the rendezvous could not be read: " + err.Error()
	}
	if !now.Listening {
		return "the head's server no longer holds the rendezvous"
	}
	// The old connections are those the group held while it served: a worker quick to
	// restart may knock before the head's ladder gets here.
	before := now
	if d.whole != nil {
		before = *d.whole
	}
	d.o.Log.Warn("group: waiting for the workers to start again before the head restarts", "workers", workers,
		"timeout_seconds", logval.Seconds(g.RejoinTimeout))
	d.status(fmt.Sprintf("remediation: waiting for %d workers to start again", workers))
	deadline := time.Now().Add(g.RejoinTimeout)
	t := time.NewTimer(g.Poll)
	defer t.Stop()
	restarted, holding := 0, []netip.Addr(nil)
	for {
		select {
		case <-ctx.Done():
			return "stopping"
		case <-t.C:
		}
		now, err = g.Rendezvous(ctx)
		if err != nil {
			d.o.Log.Warn("group: reading the rendezvous", "err", err)
		} else {
			if !now.Listening {
				return "the head's server no longer holds the rendezvous"
			}
			restarted, holding = multinode.Rejoined(before, now)
			if restarted >= workers && len(holding) == 0 {
				d.o.Log.Info("group: every worker started again and waits at the rendezvous; restarting the head", "workers", workers)
				return fmt.Sprintf("all %d workers started again", workers)
			}
		}
		if !time.Now().Before(deadline) {
			why := fmt.Sprintf("%d of %d workers started again within %s", restarted, workers, g.RejoinTimeout)
			if len(holding) > 0 {
				why += fmt.Sprintf("; the old servers of %v still hold the rendezvous", holding)
			}
			d.o.Log.Warn("group: restarting the head without all its workers", "why", why)
			return why
		}
		t.Reset(g.Poll)
	}
}

// Follower is what a node's Remedies also implement so that a worker can follow its head:
// UseProfile installs profile on this node through the switch transaction and gates it (a
// worker's gate asks the head), restoring what served when it fails.
type Follower interface {
	UseProfile(ctx context.Context, profile string) error
}

// followLaunch is a worker's check that the group runs one launch line (after a canary
// that passed, and before its restart rung): a head that runs other arguments than this
// worker's unit (a change applied on the head only; this worker's server brought back
// with the old line) for Settle (the node degraded meanwhile) is followed by applying
// the recipe again, as its file now says
// (which reuses or builds the generation of the head's launch; the switch waits for the
// head to run it). When this worker's recipe gives another launch still, the group is
// broken: the node is unhealthy with the reason, and the same head launch is not tried
// again until it changes. It reports whether it acted.
func (d *Loop) followLaunch(ctx context.Context) bool {
	g := d.o.Group
	if g == nil || g.IsHead() || g.HeadLaunch == nil {
		return false
	}
	diff, err := g.HeadLaunch(ctx)
	if err != nil {
		d.o.Log.Debug("group: comparing this worker's launch with the head's", "err", err)
		return false
	}
	if len(diff) == 0 {
		d.unmatched, d.unmatchedWhy, d.unsettled = "", "", ""
		return false
	}
	key := strings.Join(diff, "; ")
	if key == d.unmatched {
		d.setHealth(Unhealthy, d.unmatchedWhy)
		return true
	}
	if key != d.unsettled {
		d.unsettled, d.unsettledSince = key, time.Now()
	}
	if wait := g.Settle - time.Since(d.unsettledSince); wait > 0 {
		why := "the group runs two launch lines: the head runs other arguments than this worker (" + key + "); following the head once its launch has held for " + g.Settle.String()
		if d.Health() != Degraded || d.reason != why {
			d.o.Log.Warn("group: the head runs another launch line than this worker; following it once it holds", "differences", key,
				"settle_seconds", logval.Seconds(g.Settle))
		}
		d.setHealth(Degraded, why)
		return true
	}
	d.unsettled = ""
	d.unmatched = key
	d.o.Log.Warn("group: the head runs another launch line than this worker; applying the recipe again to follow it", "differences", key)
	d.status("following the head's launch")
	d.apply(ctx, "the head runs another launch line ("+key+")")
	if ctx.Err() != nil {
		return true
	}
	after, err := g.HeadLaunch(ctx)
	if err == nil && len(after) == 0 {
		d.unmatched, d.unmatchedWhy = "", ""
		d.m.rung(RungFollowHead, "ok")
		d.o.Log.Info("group: this worker runs the head's launch line")
		return true
	}
	if err == nil {
		key = strings.Join(after, "; ")
		d.unmatched = key
	}
	d.unmatchedWhy = "the group runs two launch lines: the head runs other arguments than this worker (" + key +
		"), and this worker's recipe gives its own: apply one recipe on every node (the head's change here, or this worker's on the head)"
	d.m.rung(RungFollowHead, "failed")
	d.o.Log.Error("group: this worker cannot follow the head's launch line; the group is broken", "differences", key)
	d.setHealth(Unhealthy, d.unmatchedWhy)
	return true
}

// followHead is a worker's check, after a canary that passed, that it runs the profile its
// head runs (the head's ladder may have moved it to its next profile): when it does not,
// it switches to the head's. A profile it failed to follow is not tried again until the
// head runs another (the worker stays unhealthy meanwhile). It reports whether it acted.
func (d *Loop) followHead(ctx context.Context) bool {
	g := d.o.Group
	if g == nil || g.IsHead() || g.HeadProfile == nil || d.o.Remedies == nil {
		return false
	}
	f, ok := d.o.Remedies.(Follower)
	if !ok {
		return false
	}
	head, err := g.HeadProfile(ctx)
	if err != nil || head == "" {
		if err != nil {
			// The head's API answers only while the group serves: not worth a warning at
			// every check.
			d.o.Log.Debug("group: reading the head's profile", "err", err)
		}
		return false
	}
	own := d.o.Remedies.ActiveProfile(ctx)
	switch head {
	case own:
		d.unfollowed = ""
		return false
	case d.unfollowed:
		// Still the profile it could not run: not tried again at every check (each try
		// restarts this rank, which breaks the group), and not healthy meanwhile.
		d.setHealth(Unhealthy, d.unfollowedWhy)
		return true
	}
	d.o.Log.Warn("group: the head runs another profile; this worker follows it", "head_profile", head, "profile", own)
	d.status("following the head's profile " + head)
	err = f.UseProfile(ctx, head)
	if ctx.Err() != nil {
		return true
	}
	if err != nil {
		d.unfollowed = head
		d.unfollowedWhy = fmt.Sprintf("this worker cannot run the head's profile %s: %v", head, err)
		d.m.rung(RungFollowHead, "failed")
		d.o.Log.Error("group: this worker cannot run the head's profile", "head_profile", head, "err", err)
		d.setHealth(Unhealthy, d.unfollowedWhy)
		return true
	}
	d.unfollowed = ""
	d.m.rung(RungFollowHead, "ok")
	d.o.Log.Info("group: this worker runs the head's profile", "profile", head)
	d.fresh = false
	d.recovered()
	return true
}
