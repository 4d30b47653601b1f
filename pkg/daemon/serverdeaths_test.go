package daemon

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"charm.land/log/v2"
)

// TestServerDeathsLoggedAndCounted: each death of the server that its manager restarted is
// logged once (unit, pid, how it ended, the count) and counted in canary_failures_total,
// unless the canary saw it fail already; a count that starts again (the server started
// anew) is no death.
func TestServerDeathsLoggedAndCounted(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	var logs bytes.Buffer
	o.Log = log.New(&logs)
	deaths := ServerDeaths{Unit: "sglang.service"}
	o.Server = func() (ServerDeaths, bool) { return deaths, true }
	d := New(o)
	failures := func() string {
		for _, l := range strings.Split(textfile(t, o.Metrics), "\n") {
			if strings.HasPrefix(l, `sglprov_canary_failures_total{recipe="r"}`) {
				return strings.Fields(l)[1]
			}
		}
		return "none"
	}

	d.noteServerDeaths()
	if got := failures(); got != "0" || logs.Len() != 0 {
		t.Fatalf("no death: failures %s, log %q", got, logs.String())
	}
	deaths.Restarts, deaths.PID, deaths.Exit = 1, 4242, "signal: killed"
	d.noteServerDeaths()
	if got := failures(); got != "1" {
		t.Errorf("one death the canary did not see: failures %s, want 1", got)
	}
	if l := logs.String(); strings.Count(l, "the model server died") != 1 || !strings.Contains(l, "unit=sglang.service") ||
		!strings.Contains(l, "pid=4242") || !strings.Contains(l, `exit="signal: killed"`) || !strings.Contains(l, "restarts=1") {
		t.Errorf("log:\n%s", l)
	}
	// The canary failed while the server was down (counted by the canary), and the
	// supervisor's restart is seen a round later: not counted twice.
	d.deaths.canaryFailed++
	d.noteServerDeaths()
	deaths.Restarts = 2
	d.noteServerDeaths()
	if got := failures(); got != "1" {
		t.Errorf("a death the canary saw: failures %s, want 1 (the canary's own count is its own)", got)
	}
	// Started anew by an apply: the count starts again, and its next death is one.
	deaths.Restarts = 0
	d.noteServerDeaths()
	deaths.Restarts = 1
	d.noteServerDeaths()
	if got := failures(); got != "2" {
		t.Errorf("a death after the count started again: failures %s, want 2", got)
	}
	if !strings.Contains(textfile(t, o.Metrics), `sglprov_server_restarts{recipe="r"} 1`) {
		t.Errorf("server_restarts:\n%s", textfile(t, o.Metrics))
	}
}

// TestNoHookNoHookRuns: a recipe without hooks (Hook says ErrNoHook) exports no
// hook_runs_total, through the transitions of a node that comes up healthy.
func TestNoHookNoHookRuns(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Interval = 20 * time.Millisecond
	o.Metrics = NewMetrics()
	calls := make(chan string, 100)
	o.Hook = func(ctx context.Context, hook string, h Health, reason string) error {
		calls <- hook
		return ErrNoHook
	}
	d := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the hook was never asked for")
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	if len(calls) > 0 {
		t.Errorf("asked for the hook again after ErrNoHook: %d times", len(calls))
	}
	if tf := textfile(t, o.Metrics); strings.Contains(tf, "hook_runs_total") {
		t.Errorf("hook_runs_total exported for a recipe with no hooks:\n%s", tf)
	}
}
