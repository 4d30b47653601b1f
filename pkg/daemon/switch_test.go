package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// A change whose switch failed while what served before came back and passed its gate
// again leaves the node healthy (the canaries go on, /healthz is 200 and says that a change
// is pending), and is not tried again, each try stopping the good server, until the
// recipe or the facts change.
func TestFailedSwitchWithRestoredServerStaysHealthyAndIsNotRetried(t *testing.T) {
	applies, canaries := 0, 0
	inputs := "recipe v2"
	failing := false
	restored := &switchover.Result{Previous: []switchover.Server{{Unit: "sglang-a.service"}}, Restored: true,
		RestoredVerdict: &switchover.Verdict{Pass: true}}
	o := Options{
		Apply: func(context.Context) (*engine.Report, error) {
			applies++
			if failing {
				// As the engine reports it: the smoke step failed with the switch's error.
				err := fmt.Errorf("step smoke: %w: generation 1234 failed the gate: %w", exitcode.ErrGate,
					&switchover.FailedError{Result: restored})
				return &engine.Report{Started: time.Now()}, err
			}
			return &engine.Report{Started: time.Now()}, nil
		},
		Canary: func(context.Context, func(string), time.Duration) (time.Duration, error) {
			canaries++
			return time.Millisecond, nil
		},
		Inputs:  func(context.Context) (string, error) { return inputs, nil },
		Recipe:  "r",
		Metrics: NewMetrics(),
	}
	addr, stop, err := o.Metrics.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	failing = true
	d.apply(ctx, "recipe re-read (SIGHUP)")
	if d.Health() != Healthy {
		t.Fatalf("health %s after a failed switch whose restored server passed, want healthy", d.Health())
	}
	for i := 0; i < 10; i++ {
		d.Check(ctx)
	}
	if applies != 2 {
		t.Errorf("%d applies over 10 checks with unchanged inputs, want none after the failed switch (2 in all)", applies)
	}
	if canaries != 10 || d.Health() != Healthy {
		t.Errorf("canaries %d, health %s; want 10 canaries and healthy", canaries, d.Health())
	}
	code, body := get(t, "http://"+addr.String()+"/healthz")
	if code != 200 || !strings.Contains(body, "change pending") {
		t.Errorf("/healthz with a pending change: %d %q, want 200 and the pending change", code, body)
	}
	file := filepath.Join(t.TempDir(), "sglprov.prom")
	if err := o.Metrics.WriteTextfile(file); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), `sglprov_switch_pending_failed{recipe="r"} 1`) {
		t.Errorf("metrics lack the pending change:\n%s", b)
	}
	// The recipe changes: the next check tries it.
	inputs = "recipe v3"
	failing = false
	d.Check(ctx)
	if applies != 3 || d.pending != nil {
		t.Errorf("after the inputs changed: %d applies, pending %v; want a third apply that clears it", applies, d.pending)
	}
	if code, body := get(t, "http://"+addr.String()+"/healthz"); code != 200 || body != "ok node_health=healthy\n" {
		t.Errorf("/healthz after the change passed: %d %q", code, body)
	}
}

// A worker's switch refused before its candidate started (the head runs another launch)
// left its server serving in the group: the node stays healthy with the change pending,
// not retried at every check (each retry waits for the head), until the inputs change;
// the same refusal on one node alone (or the head) is an apply that failed, retried.
func TestWorkerSwitchRefusedBeforeItsCandidateIsPending(t *testing.T) {
	untouched := &switchover.Result{Previous: []switchover.Server{{Unit: "sglang-a.service"}},
		Tried: []switchover.Attempt{{Server: switchover.Server{Unit: "sglang-a.service"}, Error: "the head does not run this launch"}}}
	for _, c := range []struct {
		name   string
		group  *Group
		health Health
		tries  int
	}{
		{"worker", &Group{Rank: 1, Count: 2}, Healthy, 2},
		{"head", &Group{Rank: 0, Count: 2}, ApplyFailed, 4},
		{"one node", nil, ApplyFailed, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			applies := 0
			failing := false
			o := Options{
				Apply: func(context.Context) (*engine.Report, error) {
					applies++
					if failing {
						return &engine.Report{Started: time.Now()}, fmt.Errorf("step smoke: %w: %w", exitcode.ErrGate, &switchover.FailedError{Result: untouched})
					}
					return &engine.Report{Started: time.Now()}, nil
				},
				Canary: func(context.Context, func(string), time.Duration) (time.Duration, error) {
					return time.Millisecond, nil
				},
				Inputs:  func(context.Context) (string, error) { return "v2", nil },
				Recipe:  "r",
				Metrics: NewMetrics(),
				Group:   c.group,
			}
			d := New(o)
			ctx := context.Background()
			d.apply(ctx, "start")
			failing = true
			d.apply(ctx, "recipe re-read (SIGHUP)")
			if d.Health() != c.health {
				t.Errorf("health %s after the refused switch, want %s", d.Health(), c.health)
			}
			for i := 0; i < 4; i++ {
				d.Check(ctx)
			}
			if applies != c.tries {
				t.Errorf("%d applies after 4 checks, want %d", applies, c.tries)
			}
		})
	}
}
