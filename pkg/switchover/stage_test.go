package switchover_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/switchover"
)

// sidePort is the port the tests' switches stage candidates on.
const sidePort = 41234

// onSidePort chooses sidePort, as FreePort would choose a free one.
func onSidePort(context.Context, switchover.Server) (int, error) { return sidePort, nil }

// servedOn records each server started on port: the model path of its unit.
func (n *node) servedOn(port int) *[]string {
	var got []string
	n.m.OnStart = func(unit string, content []byte) {
		if srv, err := switchover.Identify(unit, content); err == nil && srv.Port == port {
			got = append(got, srv.ModelPath)
		}
	}
	return &got
}

// A failed candidate, without a drain hook, never answers on the served port: it is gated
// on a side port, and the last unit that passed comes back on the served port.
func TestSwitchFailedCandidateNeverServedOnTheServedPort(t *testing.T) {
	n := newNode(t)
	old := unit("a", "a", 30000, false)
	n.install(unitA, old)
	served := n.servedOn(30000)
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate, StagePort: onSidePort,
		Candidates: []switchover.Candidate{{Profile: "p1", Content: unit("b", "b", 30000, true)}, {Profile: "p2", Content: unit("c", "c", 30000, true)}}}
	res, err := sw.Run(context.Background())
	var fe *switchover.FailedError
	if !errors.As(err, &fe) || !fe.Serving() {
		t.Fatalf("switch: %v, want a FailedError after which the old unit serves and passes", err)
	}
	if !slices.Equal(*served, []string{"/models/a"}) {
		t.Errorf("servers started on the served port: %v, want only the old one, restored", *served)
	}
	for _, a := range res.Tried {
		if a.StagePort != sidePort || a.Served != nil {
			t.Errorf("candidate %s: stage port %d, served verdict %+v; want gated on %d only", a.Server.Label(), a.StagePort, a.Served, sidePort)
		}
	}
	if n.answers["!!!!"] != 2 {
		t.Errorf("answers %v: want each candidate's \"!!!!\" seen once, on the side port", n.answers)
	}
	for _, g := range n.gated {
		if g.Port == 30000 && g.ModelPath != "/models/a" {
			t.Errorf("candidate %s was gated on the served port", g.ModelPath)
		}
	}
	if !bytes.Equal(n.m.Running(unitA), old) || !bytes.Equal(n.persistent(unitA), old) || n.m.Staged(unitA) {
		t.Errorf("after the fail: running %q, persistent %q, staged %v; want the old unit, nothing staged", n.m.Running(unitA), n.persistent(unitA), n.m.Staged(unitA))
	}
	if !strings.Contains(err.Error(), "degenerate content") {
		t.Errorf("error %q does not say why the candidates failed", err)
	}
}

// A candidate that passed on the side port is moved to the served port as rendered,
// gated again there, and only then promoted.
func TestSwitchSideStagedCandidateIsRegatedOnTheServedPort(t *testing.T) {
	n := newNode(t)
	n.install(unitA, unit("a", "a", 30000, false))
	good := unit("b", "b", 30000, false)
	served := n.servedOn(30000)
	var events []string
	n.m.OnEvent = func(e string) { events = append(events, e) }
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate, StagePort: onSidePort,
		Candidates: []switchover.Candidate{{Profile: "p", Content: good}}}
	res, err := sw.Run(context.Background())
	if err != nil {
		t.Fatalf("switch: %v", err)
	}
	var ports []int
	for _, g := range n.gated {
		ports = append(ports, g.Port)
	}
	if !slices.Equal(ports, []int{sidePort, 30000}) {
		t.Errorf("gated on ports %v, want %d then the served port 30000", ports, sidePort)
	}
	if last := n.gated[len(n.gated)-1]; last.ModelPath != "/models/b" {
		t.Errorf("the served port's gate judged %+v, want the candidate's names", last)
	}
	if !slices.Equal(*served, []string{"/models/b"}) {
		t.Errorf("servers started on the served port: %v, want the candidate once", *served)
	}
	if !bytes.Equal(n.m.Running(unitA), good) || !bytes.Equal(n.persistent(unitA), good) || n.m.Staged(unitA) {
		t.Errorf("after the pass: running %q, persistent %q, staged %v; want the unit as rendered", n.m.Running(unitA), n.persistent(unitA), n.m.Staged(unitA))
	}
	if a := res.Tried[0]; a.StagePort != sidePort || a.Served == nil || !a.Served.Pass || res.Winner == nil || res.Winner.Port != 30000 {
		t.Errorf("attempt %+v, winner %+v: want a pass on %d and on the served port", a, res.Winner, sidePort)
	}
	// The unit a reboot starts moved only at the commit, after the served port's gate.
	commit := slices.Index(events, "commit "+unitA)
	if commit < 0 || commit != len(events)-1 {
		t.Errorf("events %v: want the commit last", events)
	}
}

// A candidate that passed on the side port and fails on the served port is not kept: the
// last unit that passed is restored and gated again.
func TestSwitchSecondGateFailingRestores(t *testing.T) {
	n := newNode(t)
	old := unit("a", "a", 30000, false)
	n.install(unitA, old)
	gate := func(ctx context.Context, s switchover.Server) (switchover.Verdict, error) {
		if s.Port == 30000 && s.ModelPath == "/models/b" {
			n.gated = append(n.gated, s)
			return switchover.Verdict{Summary: "the port is firewalled"}, nil
		}
		return n.gate(ctx, s)
	}
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: gate, StagePort: onSidePort,
		Candidates: []switchover.Candidate{{Content: unit("b", "b", 30000, false)}}}
	res, err := sw.Run(context.Background())
	var fe *switchover.FailedError
	if !errors.As(err, &fe) || !fe.Serving() || res.Winner != nil {
		t.Fatalf("switch: %v, winner %+v; want a FailedError after which the old unit serves", err, res.Winner)
	}
	if !strings.Contains(err.Error(), "passed on port 41234, then on the served port 30000: the port is firewalled") {
		t.Errorf("error %q does not say that the second gate failed", err)
	}
	if !bytes.Equal(n.m.Running(unitA), old) || !bytes.Equal(n.persistent(unitA), old) || n.m.Staged(unitA) {
		t.Errorf("after the second gate failed: running %q, persistent %q, staged %v; want the old unit", n.m.Running(unitA), n.persistent(unitA), n.m.Staged(unitA))
	}
	if last := n.gated[len(n.gated)-1]; last.ModelPath != "/models/a" || res.RestoredVerdict == nil || !res.RestoredVerdict.Pass {
		t.Errorf("last gated %+v, restored verdict %+v: want the old unit gated again and passing", last, res.RestoredVerdict)
	}
}

// A kill -9 at either gate of a side-staged candidate, then a reboot, starts the last unit
// that passed: the candidate lives under /run until the served port's gate passed.
func TestSwitchSideStagedKillDuringEitherGateThenRebootServesTheOld(t *testing.T) {
	n := newNode(t)
	old := unit("a", "a", 30000, false)
	n.install(unitA, old)
	var after [][]byte
	gate := func(ctx context.Context, s switchover.Server) (switchover.Verdict, error) {
		if s.ModelPath == "/models/b" {
			killed := n.m.Clone()
			if err := killed.Reboot(); err != nil {
				t.Errorf("reboot: %v", err)
			}
			after = append(after, killed.Running(unitA))
		}
		return n.gate(ctx, s)
	}
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: gate, StagePort: onSidePort,
		Candidates: []switchover.Candidate{{Content: unit("b", "b", 30000, false)}}}
	if _, err := sw.Run(context.Background()); err != nil {
		t.Fatalf("switch: %v", err)
	}
	if len(after) != 2 {
		t.Fatalf("the candidate was gated %d times, want twice (side port, served port)", len(after))
	}
	for i, got := range after {
		if !bytes.Equal(got, old) {
			t.Errorf("a kill during gate %d then a reboot runs %q, want the old unit", i+1, got)
		}
	}
}

// Where the candidate is gated: a side port without a drain hook, the served port with one
// (clients are away) or when the switch says so, and the served port on a first install.
func TestSwitchStaging(t *testing.T) {
	drain := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name  string
		first bool
		stage switchover.Staging
		drain switchover.Hook
		want  []int
	}{
		{name: "default without a drain hook", want: []int{sidePort, sidePort, 30000}},
		{name: "default with a drain hook", drain: drain, want: []int{30000, 30000}},
		{name: "port with a drain hook", stage: switchover.StageSidePort, drain: drain, want: []int{sidePort, sidePort, 30000}},
		{name: "served without a drain hook", stage: switchover.StageServed, want: []int{30000, 30000}},
		{name: "first install", first: true, stage: switchover.StageSidePort, want: []int{30000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			if !tc.first {
				n.install(unitA, unit("a", "a", 30000, false))
			}
			// The broken first profile, then the good one.
			sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate, StagePort: onSidePort,
				Stage: tc.stage, Drain: tc.drain,
				Candidates: []switchover.Candidate{{Profile: "bad", Content: unit("b", "b", 30000, true)}, {Profile: "good", Content: unit("b", "b", 30000, false)}}}
			if tc.first {
				sw.Candidates = sw.Candidates[1:]
			}
			if _, err := sw.Run(context.Background()); err != nil {
				t.Fatalf("switch: %v", err)
			}
			var ports []int
			for _, g := range n.gated {
				ports = append(ports, g.Port)
			}
			if !slices.Equal(ports, tc.want) {
				t.Errorf("gated on ports %v, want %v", ports, tc.want)
			}
		})
	}
}

func TestWithPort(t *testing.T) {
	cont := []byte("[Unit]\nDescription=x\n\n[Service]\nExecStart=/bin/server --model-path /m \\\n  --port 30000\nRestart=on-failure\n")
	got, err := switchover.WithPort("u.service", cont, 41000)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := switchover.Identify("u.service", got)
	if err != nil || srv.Port != 41000 || srv.ModelPath != "/m" {
		t.Errorf("after WithPort: %+v, %v; want port 41000, model /m\n%s", srv, err, got)
	}
	if !strings.Contains(string(got), "\nRestart=on-failure\n") {
		t.Errorf("WithPort changed more than ExecStart=:\n%s", got)
	}
	reset := []byte("[Service]\nExecStart=/bin/server --port 30000\nExecStart=\n")
	if _, err := switchover.WithPort("u.service", reset, 41000); err == nil {
		t.Error("WithPort moved a unit whose ExecStart= list was reset to nothing")
	}
}

// A candidate a killed switch left staged and running on the served port has not passed:
// the next switch to it gates it on the side port first, not as it runs.
func TestSwitchCandidateLeftStagedIsGatedOnTheSidePort(t *testing.T) {
	n := newNode(t)
	n.install(unitA, unit("a", "a", 30000, false))
	cand := unit("b", "b", 30000, false)
	ctx := context.Background()
	if _, err := n.m.Stage(ctx, unitA, cand); err != nil {
		t.Fatal(err)
	}
	if err := n.m.Restart(ctx, unitA); err != nil {
		t.Fatal(err)
	}
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate, StagePort: onSidePort,
		Candidates: []switchover.Candidate{{Content: cand}}}
	if _, err := sw.Run(ctx); err != nil {
		t.Fatalf("switch: %v", err)
	}
	var ports []int
	for _, g := range n.gated {
		ports = append(ports, g.Port)
	}
	if !slices.Equal(ports, []int{sidePort, 30000}) {
		t.Errorf("gated on ports %v, want %d then the served port", ports, sidePort)
	}
	if !bytes.Equal(n.persistent(unitA), cand) || n.m.Staged(unitA) {
		t.Errorf("after the pass: persistent %q, staged %v; want the candidate kept", n.persistent(unitA), n.m.Staged(unitA))
	}
}

// FreePort gives a port that the server can bind on its host, never the one to avoid.
func TestFreePort(t *testing.T) {
	port, err := switchover.FreePort(context.Background(), "127.0.0.1", 30000)
	if err != nil {
		t.Fatal(err)
	}
	if port == 30000 || port <= 0 {
		t.Fatalf("FreePort = %d", port)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("the port FreePort gave cannot be bound: %v", err)
	}
	_ = ln.Close()
}
