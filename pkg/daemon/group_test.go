package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/multinode"
)

// UseProfile installs profile as the node's service does, and judges it like NextProfile.
func (r *remedies) UseProfile(ctx context.Context, profile string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gated = append(r.gated, profile)
	if !r.good[profile] {
		return errors.New("case arithmetic: degenerate content")
	}
	r.active = profile
	return nil
}

// events is what happened in a group, in order.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, s)
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.got, ", ")
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// The head of a 3-node group whose canary fails waits, before it restarts its own server,
// until both workers have started again, judged against the connections the group held
// when it last served: one worker's new server knocks already, the other's old server
// still holds the rendezvous for a while (it has not noticed yet). Only when neither old
// connection is left and both workers hold new ones does the head restart.
func TestGroupHeadRestartsAfterItsWorkers(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.FailuresBeforeRestart = 1
	ev := &events{}
	o.RestartService = func(context.Context) error { ev.add("head restarts"); return nil }
	head := netip.MustParseAddr("10.0.0.1")
	own := ap("10.0.0.1:40000") // the head's own process at its store
	// What the head's kernel shows, read by read: the group whole (at the apply); broken,
	// worker .2 already back with a new connection (it restarted before the head's ladder
	// got there) and .3's old server still connected; .3's new one there too; .3's old
	// one gone.
	reads := []multinode.Rendezvous{
		{Listening: true, Peers: []netip.AddrPort{own, ap("10.0.0.2:5000"), ap("10.0.0.3:5000")}, Local: []netip.Addr{head}},
		{Listening: true, Peers: []netip.AddrPort{own, ap("10.0.0.2:6000"), ap("10.0.0.3:5000")}, Local: []netip.Addr{head}},
		{Listening: true, Peers: []netip.AddrPort{own, ap("10.0.0.2:6000"), ap("10.0.0.3:5000"), ap("10.0.0.3:6001")}, Local: []netip.Addr{head}},
		{Listening: true, Peers: []netip.AddrPort{own, ap("10.0.0.2:6000"), ap("10.0.0.3:6001")}, Local: []netip.Addr{head}},
	}
	i := 0
	o.Group = &Group{Rank: 0, Count: 3, Poll: time.Millisecond, RejoinTimeout: 5 * time.Second,
		Rendezvous: func(context.Context) (multinode.Rendezvous, error) {
			rv := reads[min(i, len(reads)-1)]
			ev.add(fmt.Sprintf("read %d", i))
			i++
			return rv, nil
		}}
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	n.canaryOK = false
	d.Check(ctx)
	if want := "read 0, read 1, read 2, read 3, head restarts"; ev.String() != want {
		t.Errorf("events %q, want %q", ev, want)
	}
}

// A head whose workers never come back restarts anyway once the wait's bound has passed,
// saying so; a head whose own server no longer holds the rendezvous restarts at once (its
// new server waits for the workers itself).
func TestGroupHeadWaitIsBounded(t *testing.T) {
	for _, c := range []struct {
		name      string
		listening bool
		log       string
	}{
		{"workers stay away", true, "0 of 1 workers started again"},
		{"head's server gone", false, "the head's server no longer holds the rendezvous"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &node{driver: "580.95.05", canaryOK: true}
			o := n.options()
			o.FailuresBeforeRestart = 1
			var buf bytes.Buffer
			o.Log = log.New(&buf)
			reads := 0
			stuck := multinode.Rendezvous{Listening: c.listening, Peers: []netip.AddrPort{ap("10.0.0.2:5000")}}
			o.Group = &Group{Rank: 0, Count: 2, Poll: time.Millisecond, RejoinTimeout: 20 * time.Millisecond,
				Rendezvous: func(context.Context) (multinode.Rendezvous, error) { reads++; return stuck, nil }}
			d := New(o)
			ctx := context.Background()
			d.apply(ctx, "start")
			reads = 0
			n.canaryOK = false
			d.Check(ctx)
			if n.restarts != 1 || !strings.Contains(buf.String(), c.log) {
				t.Errorf("restarts %d; log lacks %q:\n%s", n.restarts, c.log, buf.String())
			}
			if !c.listening && reads != 1 {
				t.Errorf("read the rendezvous %d times, want once: nothing to wait for", reads)
			}
		})
	}
}

// A worker's ladder restarts its own server at once (it does not wait for anyone), and
// never picks a profile or a generation of its own: those rungs are skipped, so a worker
// whose head stays down gives up rather than leaving the head's arguments.
func TestGroupWorkerLadder(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.MaxRestarts = 1
	o.FailuresBeforeRestart = 1
	o.Metrics = NewMetrics()
	rem := &remedies{n: n, active: "a", cands: []string{"a", "b"}, good: map[string]bool{"b": true}}
	o.Remedies = rem
	o.Generations = generationsFunc(func(context.Context) error { t.Error("a worker rolled back alone"); return nil })
	o.Group = &Group{Rank: 1, Count: 2,
		Rendezvous: func(context.Context) (multinode.Rendezvous, error) {
			t.Error("a worker read the rendezvous")
			return multinode.Rendezvous{}, nil
		}}
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	n.canaryOK = false
	d.Check(ctx) // restart
	d.Check(ctx) // regate fails; next_profile and previous_generation skipped; give up
	if n.restarts != 1 || len(rem.gated) != 0 || d.Health() != Unhealthy {
		t.Errorf("restarts %d, profiles gated %v, health %s; want 1, none, unhealthy", n.restarts, rem.gated, d.Health())
	}
	tf := textfile(t, o.Metrics)
	for _, w := range []string{
		`sglprov_remediation_total{recipe="r",result="ok",rung="restart"} 1`,
		`sglprov_remediation_total{recipe="r",result="skipped",rung="next_profile"} 1`,
		`sglprov_remediation_total{recipe="r",result="skipped",rung="previous_generation"} 1`,
	} {
		if !strings.Contains(tf, w) {
			t.Errorf("metrics lack %s:\n%s", w, tf)
		}
	}
}

type generationsFunc func(context.Context) error

func (f generationsFunc) RollBack(ctx context.Context) error { return f(ctx) }

// When the head has moved to another profile (its ladder's next_profile), a worker whose
// canary passes switches to the head's profile; one it cannot run makes it unhealthy and
// is not tried again at every check, only once the head runs another.
func TestGroupWorkerFollowsTheHeadsProfile(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	rem := &remedies{n: n, active: "a", cands: []string{"a", "b", "c"}, good: map[string]bool{"a": true, "b": true}}
	o.Remedies = rem
	var mu sync.Mutex
	headProfile := "a"
	o.Group = &Group{Rank: 1, Count: 2, HeadProfile: func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return headProfile, nil
	}}
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	d.Check(ctx)
	if len(rem.gated) != 0 {
		t.Fatalf("switched to %v while it ran the head's profile", rem.gated)
	}
	set := func(p string) { mu.Lock(); headProfile = p; mu.Unlock() }
	set("b")
	d.Check(ctx)
	if rem.active != "b" || d.Health() != Healthy {
		t.Errorf("active %q, health %s after the head moved to b", rem.active, d.Health())
	}
	set("c")
	d.Check(ctx)
	d.Check(ctx)
	if fmt.Sprint(rem.gated) != "[b c]" || d.Health() != Unhealthy || !strings.Contains(d.reason, "cannot run the head's profile c") {
		t.Errorf("gated %v, health %s (%s); want [b c], unhealthy: c tried once", rem.gated, d.Health(), d.reason)
	}
	tf := textfile(t, o.Metrics)
	for _, w := range []string{
		`sglprov_remediation_total{recipe="r",result="ok",rung="follow_head"} 1`,
		`sglprov_remediation_total{recipe="r",result="failed",rung="follow_head"} 1`,
	} {
		if !strings.Contains(tf, w) {
			t.Errorf("metrics lack %s:\n%s", w, tf)
		}
	}
}

// While the head waits for its workers it says it does not serve: a canary that failed on
// its answers (the server still answers /health) leaves /healthz 503 during the wait, not
// 200 until the restart.
func TestGroupHeadUnhealthyWhileItWaits(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.FailuresBeforeRestart = 1
	var d *Loop
	var during Health
	o.Group = &Group{Rank: 0, Count: 2, Poll: time.Millisecond, RejoinTimeout: time.Millisecond,
		Rendezvous: func(context.Context) (multinode.Rendezvous, error) {
			if d != nil && n.restarts == 0 {
				during = d.Health()
			}
			return multinode.Rendezvous{Listening: true}, nil
		}}
	d = New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	n.canaryOK = false
	d.Check(ctx)
	if during != Degraded || n.restarts != 1 {
		t.Errorf("health %q while the head waited for its workers, %d restarts; want degraded, 1", during, n.restarts)
	}
}

// launches stands in for a group's two launch lines: what the head's server runs, what
// this worker's unit runs, and what this worker's recipe gives (an apply installs it).
type launches struct {
	mu                   sync.Mutex
	head, worker, recipe string
}

func (l *launches) differences(context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == l.worker {
		return nil, nil
	}
	return []string{"--attention-backend: the head runs " + l.head + ", this node " + l.worker}, nil
}

// A worker whose head runs another launch line (a change applied on the head only, the
// worker's server brought back with the old line) does not stay healthy on it: after a
// canary that passes, and instead of its restart rung, it applies its recipe again to
// follow the head; a recipe that gives the head's launch ends with one launch line, one
// that gives another leaves the node unhealthy naming the two lines, not applied again
// at every check.
func TestGroupWorkerFollowsTheHeadsLaunch(t *testing.T) {
	for _, c := range []struct {
		name         string
		canaryOK     bool
		recipe       string
		health       Health
		applies      int
		restarts     int
		reason, rung string
		worker       string
	}{
		{name: "the worker's recipe has the head's change", canaryOK: true, recipe: "flashinfer", health: Healthy,
			applies: 2, worker: "flashinfer", rung: `result="ok",rung="follow_head"} 1`},
		{name: "the worker's recipe gives another launch", canaryOK: true, recipe: "triton", health: Unhealthy, applies: 2, worker: "triton",
			reason: "the group runs two launch lines: the head runs other arguments than this worker (--attention-backend: the head runs flashinfer, this node triton)",
			rung:   `result="failed",rung="follow_head"} 1`},
		{name: "the restart rung follows the head instead of restarting", canaryOK: false, recipe: "flashinfer", health: Degraded, reason: "canary failed",
			applies: 2, worker: "flashinfer", rung: `result="ok",rung="follow_head"} 1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &node{driver: "580.95.05", canaryOK: c.canaryOK}
			l := &launches{head: "triton", worker: "triton", recipe: "triton"}
			o := n.options()
			apply := o.Apply
			o.Apply = func(ctx context.Context) (*engine.Report, error) {
				l.mu.Lock()
				l.worker = l.recipe
				l.mu.Unlock()
				return apply(ctx)
			}
			o.Metrics = NewMetrics()
			o.Group = &Group{Rank: 1, Count: 2, HeadLaunch: l.differences, Settle: 50 * time.Millisecond}
			d := New(o)
			ctx := context.Background()
			d.apply(ctx, "start")
			// The head's change: its server runs flashinfer; this worker's server came back
			// with its own line; its recipe file now says c.recipe.
			l.mu.Lock()
			l.head, l.recipe = "flashinfer", c.recipe
			l.mu.Unlock()
			// The first sight of the head's other line: degraded, nothing applied while the
			// head's switch may still be judged.
			for i := 0; i < 2; i++ { // past FailuresBeforeRestart when the canary fails
				d.Check(ctx)
			}
			if len(n.applies) != 1 || n.restarts != 0 || d.Health() != Degraded {
				t.Fatalf("before the head's line held: %d applies, %d restarts, health %s (%s)", len(n.applies), n.restarts, d.Health(), d.reason)
			}
			time.Sleep(60 * time.Millisecond)
			for i := 0; i < 2; i++ {
				d.Check(ctx)
			}
			if len(n.applies) != c.applies || n.restarts != c.restarts || l.worker != c.worker || d.Health() != c.health || !strings.Contains(d.reason, c.reason) {
				t.Fatalf("applies %d, restarts %d, worker runs %s, health %s (%s); want %d, %d, %s, %s (%s)",
					len(n.applies), n.restarts, l.worker, d.Health(), d.reason, c.applies, c.restarts, c.worker, c.health, c.reason)
			}
			if tf := textfile(t, o.Metrics); !strings.Contains(tf, c.rung) {
				t.Errorf("metrics lack %s:\n%s", c.rung, tf)
			}
			// The same head launch is not followed again at every check.
			d.Check(ctx)
			d.Check(ctx)
			if len(n.applies) != c.applies || (c.canaryOK && d.Health() != c.health) {
				t.Errorf("after more checks: %d applies, health %s", len(n.applies), d.Health())
			}
		})
	}
}
