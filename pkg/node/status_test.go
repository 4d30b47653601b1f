package node_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/node"
)

// TestApplyRunning: a state dir no one holds has no apply running; one the daemon holds
// between its applies names the daemon and no apply; one an apply holds names the apply.
func TestApplyRunning(t *testing.T) {
	dir := t.TempDir()
	if running, d := node.ApplyRunning(dir, nil); running != 0 || d != 0 {
		t.Errorf("free state dir: running %d, daemon %d; want 0, 0", running, d)
	}
	lock, err := engine.AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if running, d := node.ApplyRunning(dir, nil); running != os.Getpid() || d != 0 {
		t.Errorf("held by an apply: running %d, daemon %d; want %d, 0", running, d, os.Getpid())
	}
	if err := lock.SetNote(engine.NoteDaemon); err != nil {
		t.Fatal(err)
	}
	if running, d := node.ApplyRunning(dir, nil); running != 0 || d != os.Getpid() {
		t.Errorf("held by the daemon: running %d, daemon %d; want 0, %d", running, d, os.Getpid())
	}
}

// TestProfileOf: the profile the state records as running, and the gate's verdict of the
// last report: the winner and the profiles that failed before it.
func TestProfileOf(t *testing.T) {
	data, _ := json.Marshal(map[string]string{"active": "fast"})
	st := &engine.State{Steps: map[string]*engine.StepRecord{"service": {Result: engine.ResultOK, Data: data}, "other": {}}}
	rep := &engine.Report{Steps: []*engine.StepReport{{Kind: "smoke", Result: engine.ResultOK, Details: map[string]any{
		"profile":  "fast",
		"profiles": []any{map[string]any{"profile": "plain"}, map[string]any{"profile": "fast"}},
	}}}}
	p := node.ProfileOf(rep, st)
	if p == nil || p.Step != "service" || p.Running != "fast" || p.Won != "fast" || len(p.Failed) != 1 || p.Failed[0] != "plain" || p.AllFailed {
		t.Errorf("ProfileOf = %+v; want step service running fast, won fast, failed [plain]", p)
	}
	if p := node.ProfileOf(nil, &engine.State{Steps: map[string]*engine.StepRecord{}}); p != nil {
		t.Errorf("no records: ProfileOf = %+v, want nil", p)
	}
}

// TestProfileWrite: status's profile line says which profile passed and which failed
// before it, or that every candidate failed and what the unit runs; nil says nothing.
func TestProfileWrite(t *testing.T) {
	for _, tc := range []struct {
		p    *node.Profile
		want string
	}{
		{nil, ""},
		{&node.Profile{Won: "fast", Failed: []string{"plain"}}, "profile: fast passed the gate (failed before it: plain)\n"},
		{&node.Profile{AllFailed: true, Failed: []string{"a", "b"}, Running: "a"}, "profile: every candidate failed the gate (a, b); the unit runs a\n"},
		{&node.Profile{Running: "a"}, "profile: a (installed; the last run did not gate it)\n"},
	} {
		var b strings.Builder
		tc.p.Write(&b)
		if b.String() != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, b.String(), tc.want)
		}
	}
}

// TestReadStatus: with no run recorded, status's reading is one empty run, exit 1, and a
// message that names the state dir (and the recipe asked for); while an apply holds the
// lock it is exit 0 and the state, not the message.
func TestReadStatus(t *testing.T) {
	dir := t.TempDir()
	rd, err := node.ReadStatus(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := rd.Status()
	if !rd.None || len(rd.Runs) != 1 || rd.ExitCode != 1 || s.ExitCode != 1 || s.Message != "no run recorded in "+dir || s.State != nil {
		t.Errorf("no run: %+v, status %+v", rd, s)
	}
	if rd, err = node.ReadStatus(dir, "a", nil); err != nil || rd.Status().Message != "no run of recipe a recorded in "+dir {
		t.Errorf("no run of a: %+v, %v", rd, err)
	}
	lock, err := engine.AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	rd, err = node.ReadStatus(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := rd.Status(); rd.ExitCode != 0 || s.ApplyRunning != os.Getpid() || s.Message != "" || s.State == nil {
		t.Errorf("apply running: %+v, status %+v", rd, s)
	}
}

// TestReadShared: a reader takes a free state dir's lock shared and holds it; one an apply
// holds is not taken and names the apply; one the daemon holds between its applies names
// the daemon alone, and while it applies both.
func TestReadShared(t *testing.T) {
	dir := t.TempDir()
	held, err := engine.AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	held.Release()
	lock, running, d, err := node.ReadShared(dir, nil)
	if err != nil || lock == nil || running != 0 || d != 0 {
		t.Fatalf("free: %v, %d, %d, %v", lock, running, d, err)
	}
	lock.Release()
	if held, err = engine.AcquireLock(dir); err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	pid := os.Getpid()
	for _, tc := range []struct {
		note            string
		running, daemon int
	}{{"", pid, 0}, {engine.NoteDaemon, 0, pid}, {engine.NoteDaemonApplying, pid, pid}} {
		if tc.note != "" {
			if err := held.SetNote(tc.note); err != nil {
				t.Fatal(err)
			}
		}
		lock, running, d, err := node.ReadShared(dir, nil)
		if err != nil || lock != nil || running != tc.running || d != tc.daemon {
			t.Errorf("note %q: %v, %d, %d, %v; want no lock, %d, %d", tc.note, lock, running, d, err, tc.running, tc.daemon)
		}
	}
}
