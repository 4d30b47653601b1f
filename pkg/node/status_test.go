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
