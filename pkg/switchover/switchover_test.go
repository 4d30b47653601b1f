package switchover_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/pkg/switchover/fakeunits"
)

// unit renders a unit whose server serves model under served on port; a broken one
// answers "!!!!".
func unit(model, served string, port int, broken bool) []byte {
	extra := ""
	if broken {
		extra = " --broken"
	}
	return fmt.Appendf(nil, "[Unit]\nDescription=test\n\n[Service]\nExecStart=/usr/bin/fake-sglang --model-path /models/%s --served-model-name %s --port %d%s\n\n[Install]\nWantedBy=multi-user.target\n",
		model, served, port, extra)
}

// node is a fake node: its units, and a gate that asks whoever answers on a port, as the
// real gate does over HTTP.
type node struct {
	t     *testing.T
	m     *fakeunits.Manager
	gated []switchover.Server
	// answers counts the gate's requests by what answered: "ok", "!!!!", "other server",
	// "refused".
	answers map[string]int
}

func newNode(t *testing.T) *node {
	return &node{t: t, m: fakeunits.New(t.TempDir()), answers: map[string]int{}}
}

// answering returns the unit content of the server that answers on port.
func (n *node) answering(port int) []byte {
	for _, u := range n.m.Active() {
		c := n.m.Running(u)
		srv, err := switchover.Identify(u, c)
		if err == nil && srv.Port == port {
			return c
		}
	}
	return nil
}

// gate judges whoever answers on s.Port against s's own names, as smoke.Run does with
// ServedModel and ModelPath set.
func (n *node) gate(_ context.Context, s switchover.Server) (switchover.Verdict, error) {
	n.gated = append(n.gated, s)
	c := n.answering(s.Port)
	if c == nil {
		n.answers["refused"]++
		return switchover.Verdict{Summary: "connection refused"}, nil
	}
	got, _ := switchover.Identify("", c)
	if got.ServedModel != s.ServedModel || got.ModelPath != s.ModelPath {
		n.answers["other server"]++
		return switchover.Verdict{Summary: fmt.Sprintf("the server lists %s, not %s: another server answers", got.ServedModel, s.ServedModel)}, nil
	}
	if bytes.Contains(c, []byte("--broken")) {
		n.answers["!!!!"]++
		return switchover.Verdict{Summary: "degenerate content: !!!!"}, nil
	}
	n.answers["ok"]++
	return switchover.Verdict{Pass: true, Summary: "3/3 passed"}, nil
}

// install makes unit content the enabled, running unit that passed.
func (n *node) install(name string, content []byte) {
	n.t.Helper()
	if _, err := n.m.Install(context.Background(), name, content); err != nil {
		n.t.Fatal(err)
	}
	if err := n.m.Restart(context.Background(), name); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) persistent(name string) []byte {
	b, _ := os.ReadFile(n.m.UnitPath(name))
	return b
}

const unitA, unitB = "sglang-a.service", "sglang-b.service"

func TestSwitchPromotesTheFirstCandidateThatPasses(t *testing.T) {
	n := newNode(t)
	old := unit("m", "m", 30000, false)
	n.install(unitA, old)
	bad, good := unit("m", "m", 30000, true), unit("m", "m", 30000, false)
	good = append(good, "# profile good\n"...)
	var hooks []string
	n.m.OnEvent = func(e string) { hooks = append(hooks, e) }
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate,
		Candidates: []switchover.Candidate{{Profile: "bad", Content: bad}, {Profile: "good", Content: good}},
		Drain:      func(context.Context) error { hooks = append(hooks, "drain"); return nil },
		Undrain:    func(context.Context) error { hooks = append(hooks, "undrain"); return nil },
		Promoted: func(_ context.Context, w switchover.Server) error {
			// What serves is recorded once /etc holds the winner, before the undrain hook.
			if !bytes.Equal(n.persistent(unitA), good) {
				t.Errorf("Promoted called while the persistent unit is %q", n.persistent(unitA))
			}
			hooks = append(hooks, "promoted "+w.Profile)
			return nil
		},
	}
	res, err := sw.Run(context.Background())
	if err != nil {
		t.Fatalf("switch: %v", err)
	}
	if res.WinnerProfile != "good" || !res.Drained || !res.Undrained {
		t.Errorf("winner %q drained %v undrained %v, want good, true, true", res.WinnerProfile, res.Drained, res.Undrained)
	}
	if !bytes.Equal(n.persistent(unitA), good) || n.m.Staged(unitA) || !n.m.Enabled(unitA) {
		t.Errorf("after the pass: persistent unit %q, staged %v, enabled %v; want the good unit, nothing staged, enabled", n.persistent(unitA), n.m.Staged(unitA), n.m.Enabled(unitA))
	}
	if !bytes.Equal(n.m.Running(unitA), good) {
		t.Errorf("running %q, want the good unit", n.m.Running(unitA))
	}
	// The drain hook ran before the first restart; the undrain hook after the promote.
	first := slices.IndexFunc(hooks, func(e string) bool { return strings.HasPrefix(e, "start") })
	if d := slices.Index(hooks, "drain"); d < 0 || first < 0 || d > first {
		t.Errorf("events %v: want drain before the first start", hooks)
	}
	if u, c := slices.Index(hooks, "undrain"), slices.Index(hooks, "commit "+unitA); u < c {
		t.Errorf("events %v: want undrain after the commit", hooks)
	}
	if p, c, u := slices.Index(hooks, "promoted good"), slices.Index(hooks, "commit "+unitA), slices.Index(hooks, "undrain"); p < c || p > u {
		t.Errorf("events %v: want the promotion recorded after the commit and before the undrain", hooks)
	}
	lkg, ok, _ := service.LoadLastKnownGood(sw.StateDir, unitA)
	if !ok || !bytes.Equal(lkg, good) {
		t.Errorf("last-known-good %q, want the good unit", lkg)
	}
}

func TestSwitchFailRestoresThePreviousAndGatesItWithItsOwnNames(t *testing.T) {
	n := newNode(t)
	genA := unit("gen-a/model", "qwen-a", 30000, false)
	n.install(unitA, genA)
	genB := unit("gen-b/model", "qwen-b", 30000, true)
	undrained := false
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate,
		Candidates: []switchover.Candidate{{Content: genB}},
		Undrain:    func(context.Context) error { undrained = true; return nil },
		Drain:      func(context.Context) error { return nil }}
	res, err := sw.Run(context.Background())
	var fe *switchover.FailedError
	if !errors.As(err, &fe) {
		t.Fatalf("switch: %v, want a FailedError", err)
	}
	if !fe.Serving() || !res.Restored || res.RestoredVerdict == nil || !res.RestoredVerdict.Pass {
		t.Errorf("restored %v verdict %+v: want the previous unit restored and passing", res.Restored, res.RestoredVerdict)
	}
	if !strings.Contains(err.Error(), "was restored and passed the gate again") {
		t.Errorf("error %q does not say that the previous unit passes again", err)
	}
	if res.Untouched() {
		t.Error("a switch whose candidate started and was restored is reported untouched")
	}
	last := n.gated[len(n.gated)-1]
	if last.ServedModel != "qwen-a" || last.ModelPath != "/models/gen-a/model" {
		t.Errorf("the restored unit was gated as %+v, want its own names (qwen-a, /models/gen-a/model)", last)
	}
	if !bytes.Equal(n.m.Running(unitA), genA) || !bytes.Equal(n.persistent(unitA), genA) || n.m.Staged(unitA) {
		t.Errorf("after the fail: running %q, persistent %q, staged %v; want generation A, nothing staged", n.m.Running(unitA), n.persistent(unitA), n.m.Staged(unitA))
	}
	if !undrained {
		t.Error("the undrain hook did not run although the restored unit passed")
	}
}

func TestSwitchRestoredUnitThatFailsTooStaysDrained(t *testing.T) {
	n := newNode(t)
	n.install(unitA, unit("a", "a", 30000, true)) // broke on disk since it passed
	undrained := false
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate,
		Candidates: []switchover.Candidate{{Content: unit("b", "b", 30000, true)}},
		Drain:      func(context.Context) error { return nil },
		Undrain:    func(context.Context) error { undrained = true; return nil }}
	_, err := sw.Run(context.Background())
	var fe *switchover.FailedError
	if !errors.As(err, &fe) || fe.Serving() {
		t.Fatalf("switch: %v, want a FailedError whose restore failed the gate", err)
	}
	if !strings.Contains(err.Error(), "failed the gate too") || undrained {
		t.Errorf("error %q, undrained %v: want 'failed the gate too' and no undrain", err, undrained)
	}
}

// A model switch: B takes over A's port. A kill -9 at any moment of B's gate, then a
// reboot, serves A: B was staged for this boot only and A stayed enabled.
func TestModelSwitchKillDuringGateThenRebootServesTheOld(t *testing.T) {
	n := newNode(t)
	a := unit("model-A", "model-A", 30000, false)
	n.install(unitA, a)
	b := unit("model-B", "model-B", 30000, false)
	var afterReboot [][]string
	gate := func(ctx context.Context, s switchover.Server) (switchover.Verdict, error) {
		if s.Unit == unitB {
			killed := n.m.Clone()
			if err := killed.Reboot(); err != nil {
				t.Errorf("reboot: %v", err)
			}
			afterReboot = append(afterReboot, killed.Active())
		}
		return n.gate(ctx, s)
	}
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitB, Gate: gate, Replaces: []string{unitA},
		Candidates: []switchover.Candidate{{Content: b}}}
	if _, err := sw.Run(context.Background()); err != nil {
		t.Fatalf("switch: %v", err)
	}
	// B is gated twice: on a side port, then on the served port.
	if len(afterReboot) != 2 {
		t.Errorf("B was gated %d times, want twice", len(afterReboot))
	}
	for _, got := range afterReboot {
		if !slices.Equal(got, []string{unitA}) {
			t.Errorf("a kill during B's gate then a reboot runs %v, want only %s", got, unitA)
		}
	}
	// After the pass: B is the unit a reboot starts, A is out of the boot.
	if n.m.Enabled(unitA) || !n.m.Enabled(unitB) || n.m.Running(unitA) != nil {
		t.Errorf("after B passed: A enabled %v running %v, B enabled %v", n.m.Enabled(unitA), n.m.Running(unitA) != nil, n.m.Enabled(unitB))
	}
	if err := n.m.Reboot(); err != nil {
		t.Fatal(err)
	}
	if got := n.m.Active(); !slices.Equal(got, []string{unitB}) {
		t.Errorf("after B passed and a reboot: %v run, want only %s", got, unitB)
	}
}

func TestModelSwitchFailBringsBackTheReplacedUnitGatedAsItself(t *testing.T) {
	n := newNode(t)
	a := unit("model-A", "model-A", 30000, false)
	n.install(unitA, a)
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitB, Gate: n.gate, Replaces: []string{unitA},
		Candidates: []switchover.Candidate{{Profile: "p1", Content: unit("model-B", "model-B", 30000, true)}}}
	res, err := sw.Run(context.Background())
	var fe *switchover.FailedError
	if !errors.As(err, &fe) || !fe.Serving() {
		t.Fatalf("switch: %v, want a FailedError after which A serves and passes", err)
	}
	if !strings.Contains(err.Error(), "("+unitA+") was restored and passed the gate again") {
		t.Errorf("error %q does not say that %s passes again", err, unitA)
	}
	if !n.m.Enabled(unitA) || !bytes.Equal(n.m.Running(unitA), a) || n.m.Running(unitB) != nil || n.m.Enabled(unitB) || n.m.Persistent(unitB) {
		t.Errorf("after B failed: A enabled %v running %v; B running %v enabled %v persistent %v", n.m.Enabled(unitA),
			n.m.Running(unitA) != nil, n.m.Running(unitB) != nil, n.m.Enabled(unitB), n.m.Persistent(unitB))
	}
	if got := res.Previous; len(got) != 1 || got[0].ServedModel != "model-A" {
		t.Errorf("previous %+v, want A's server", got)
	}
	if n.answers["other server"] != 0 {
		t.Errorf("the gate judged another server %d times", n.answers["other server"])
	}
}

// A first install has no unit that passed: a kill during the gate and a reboot leave
// nothing serving, rather than a server that never passed.
func TestFirstInstallKillDuringGateServesNothingAfterReboot(t *testing.T) {
	n := newNode(t)
	var after []string
	gate := func(ctx context.Context, s switchover.Server) (switchover.Verdict, error) {
		killed := n.m.Clone()
		_ = killed.Reboot()
		after = killed.Active()
		return n.gate(ctx, s)
	}
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: gate,
		Candidates: []switchover.Candidate{{Content: unit("m", "m", 30000, true)}}}
	_, err := sw.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no unit that passed before") {
		t.Errorf("switch: %v, want a failure that says nothing passed before", err)
	}
	if len(after) != 0 {
		t.Errorf("a kill during the first gate then a reboot runs %v, want nothing", after)
	}
	if n.m.Running(unitA) != nil || n.m.Staged(unitA) {
		t.Errorf("after the first install failed: running %v staged %v, want neither", n.m.Running(unitA) != nil, n.m.Staged(unitA))
	}
}

// A candidate is judged against its own names: another server on the port (here A's,
// whose port B also names) does not pass B's gate.
func TestSwitchDoesNotPassAgainstAnotherServerOnThePort(t *testing.T) {
	n := newNode(t)
	n.install("other.service", unit("other", "other", 30000, false))
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitB, Gate: n.gate,
		Candidates: []switchover.Candidate{{Content: unit("model-B", "model-B", 30000, false)}}}
	_, err := sw.Run(context.Background())
	if err == nil {
		t.Fatal("the switch passed while another server held the port")
	}
	if n.answers["other server"] == 0 {
		t.Errorf("answers %v: want the gate to have seen the other server and failed it", n.answers)
	}
}

// A gate that cannot run (ctx ended, bad config) still leaves the last unit that passed
// in service.
func TestSwitchGateErrorRestores(t *testing.T) {
	n := newNode(t)
	a := unit("a", "a", 30000, false)
	n.install(unitA, a)
	gate := func(ctx context.Context, s switchover.Server) (switchover.Verdict, error) {
		if strings.Contains(s.ModelPath, "/b") {
			return switchover.Verdict{}, errors.New("bad accuracy file")
		}
		return n.gate(ctx, s)
	}
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: gate,
		Candidates: []switchover.Candidate{{Content: unit("b", "b", 30000, false)}}}
	_, err := sw.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "bad accuracy file") {
		t.Fatalf("switch: %v, want the gate's error", err)
	}
	if !bytes.Equal(n.m.Running(unitA), a) || n.m.Staged(unitA) {
		t.Errorf("after the gate error: running %q staged %v, want A and nothing staged", n.m.Running(unitA), n.m.Staged(unitA))
	}
}

// Without staging (the exec manager) the candidate is installed as it is tried and the
// last unit that passed comes back from the state dir.
func TestSwitchWithoutStagingRestoresLastKnownGood(t *testing.T) {
	n := newNode(t)
	state := t.TempDir()
	a := unit("a", "a", 30000, false)
	plain := n.m.Plain()
	ok := switchover.Switch{Manager: plain, StateDir: state, Unit: unitA, Gate: n.gate,
		Candidates: []switchover.Candidate{{Content: a}}}
	if _, err := ok.Run(context.Background()); err != nil {
		t.Fatalf("first switch: %v", err)
	}
	bad := ok
	bad.Candidates = []switchover.Candidate{{Content: unit("b", "b", 30000, true)}}
	_, err := bad.Run(context.Background())
	var fe *switchover.FailedError
	if !errors.As(err, &fe) || !fe.Serving() {
		t.Fatalf("second switch: %v, want a FailedError after which A serves", err)
	}
	if !bytes.Equal(n.m.Running(unitA), a) {
		t.Errorf("running %q, want A", n.m.Running(unitA))
	}
}

// A candidate that is what runs already, with nothing changed on disk, is gated as it
// runs: not restarted, and the node is not drained.
func TestSwitchUnchangedCandidateRestartsNothing(t *testing.T) {
	n := newNode(t)
	a := unit("a", "a", 30000, false)
	n.install(unitA, a)
	before := len(n.m.Events)
	drained := false
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate,
		Candidates: []switchover.Candidate{{Content: a}},
		Drain:      func(context.Context) error { drained = true; return nil }}
	if _, err := sw.Run(context.Background()); err != nil {
		t.Fatalf("switch: %v", err)
	}
	for _, e := range n.m.Events[before:] {
		if strings.HasPrefix(e, "start") || strings.HasPrefix(e, "stop") {
			t.Errorf("an unchanged switch did %q", e)
		}
	}
	if drained {
		t.Error("an unchanged switch drained the node")
	}
}

// A switch that must wait before a candidate starts (Await: a worker of a multi-node group
// waiting for its head) and is refused changes nothing: no drain, no stop, no stage, what
// ran keeps running and nothing is restored. Once Await lets it, the candidate starts,
// and Await is asked with the candidate's own server. A candidate that is what runs, and
// a first install, do not wait.
func TestSwitchAwaitRefusedChangesNothing(t *testing.T) {
	n := newNode(t)
	old, cand := unit("m", "old", 30000, false), unit("m", "new", 30000, false)
	n.install(unitA, old)
	before := len(n.m.Events)
	drained := false
	var asked []switchover.Server
	refuse := errors.New("the head 10.0.0.1 does not run this launch")
	sw := switchover.Switch{Manager: n.m, StateDir: t.TempDir(), Unit: unitA, Gate: n.gate,
		Candidates: []switchover.Candidate{{Content: cand}},
		Drain:      func(context.Context) error { drained = true; return nil },
		Await: func(_ context.Context, s switchover.Server) error {
			asked = append(asked, s)
			return refuse
		}}
	res, err := sw.Run(context.Background())
	var fe *switchover.FailedError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), refuse.Error()) || !strings.Contains(err.Error(), "was left as it was (no candidate started)") {
		t.Fatalf("refused wait: %v", err)
	}
	if res.Restored || drained || len(asked) != 1 || asked[0].ServedModel != "new" {
		t.Errorf("restored %v, drained %v, asked %+v: want nothing restored or drained, the candidate's server asked once", res.Restored, drained, asked)
	}
	if !res.Untouched() || !fe.Result.Untouched() {
		t.Errorf("a refused wait is not reported untouched: %+v", res)
	}
	for _, e := range n.m.Events[before:] {
		t.Errorf("a refused wait did %q", e)
	}
	if !bytes.Equal(n.m.Running(unitA), old) || n.m.Staged(unitA) {
		t.Errorf("running %q, staged %v: want the old unit untouched", n.m.Running(unitA), n.m.Staged(unitA))
	}

	// Allowed: the candidate starts after the wait and is promoted.
	var order []string
	n.m.OnEvent = func(e string) { order = append(order, e) }
	sw.Await = func(context.Context, switchover.Server) error { order = append(order, "await"); return nil }
	if _, err := sw.Run(context.Background()); err != nil {
		t.Fatalf("allowed wait: %v", err)
	}
	if len(order) == 0 || order[0] != "await" || !bytes.Equal(n.m.Running(unitA), cand) {
		t.Errorf("events %v, running %q: want the wait first, then the candidate serving", order, n.m.Running(unitA))
	}

	// What runs already, and a first install, do not wait.
	sw.Await = func(context.Context, switchover.Server) error { return refuse }
	if res, err := sw.Run(context.Background()); err != nil || res.Untouched() {
		t.Errorf("the candidate that runs already waited (%v), or a switch that passed is untouched (%v)", err, res.Untouched())
	}
	first := newNode(t)
	sw = switchover.Switch{Manager: first.m, StateDir: t.TempDir(), Unit: unitA, Gate: first.gate,
		Candidates: []switchover.Candidate{{Content: cand}}, Await: sw.Await}
	if _, err := sw.Run(context.Background()); err != nil {
		t.Errorf("a first install waited: %v", err)
	}
}
