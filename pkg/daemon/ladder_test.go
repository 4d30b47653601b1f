package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/gate"
)

// remedies is a node's service as the ladder sees it: the profile it runs, the profiles
// that answer correctly, and what the ladder asked. Like the real service step, a profile
// it installs is what the canary talks to afterwards.
type remedies struct {
	mu      sync.Mutex
	n       *node
	active  string
	cands   []string
	good    map[string]bool
	regates int
	gated   []string
}

func (r *remedies) Regate(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.regates++
	if r.good[r.active] {
		return nil
	}
	return errors.New(`case arithmetic: degenerate content ("!!!!")`)
}

func (r *remedies) ActiveProfile(context.Context) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active
}

func (r *remedies) NextProfile(ctx context.Context, tried []string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cands {
		if !contains(tried, c) {
			r.active = c
			r.gated = append(r.gated, c)
			r.n.mu.Lock()
			r.n.canaryOK = r.good[c]
			r.n.mu.Unlock()
			if r.good[c] {
				return c, nil
			}
			return c, errors.New("case arithmetic: degenerate content")
		}
	}
	return "", ErrNoRung
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func textfile(t *testing.T, m *Metrics) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.prom")
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	return string(b)
}

// A server answering garbage climbs the ladder: one restart (which does not help), the
// whole gate (which fails too), then the next profile, which passes: healthy again with no
// one's help, each rung counted.
func TestLadderClimbsToNextProfile(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.MaxRestarts = 1
	o.Metrics = NewMetrics()
	rem := &remedies{n: n, active: "a", cands: []string{"a", "b", "c"}, good: map[string]bool{"b": true}}
	o.Remedies = rem
	hooks := &hookLog{}
	o.Hook = hooks.hook
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	d.syncHooks(ctx)
	n.canaryOK = false
	var health []Health
	for range 5 {
		d.Check(ctx)
		d.syncHooks(ctx)
		health = append(health, d.Health())
	}
	// fail 1; fail 2: restart; fail 1; fail 2: regate fails, profile b passes; b serves.
	want := []Health{Degraded, Degraded, Degraded, Healthy, Healthy}
	if fmt.Sprint(health) != fmt.Sprint(want) {
		t.Errorf("health by round %v, want %v", health, want)
	}
	if n.restarts != 1 || rem.regates != 1 || fmt.Sprint(rem.gated) != "[b]" {
		t.Errorf("restarts %d, regates %d, profiles gated %v; want 1, 1, [b]", n.restarts, rem.regates, rem.gated)
	}
	tf := textfile(t, o.Metrics)
	for _, w := range []string{
		`sglprov_remediation_total{recipe="r",result="ok",rung="restart"} 1`,
		`sglprov_remediation_total{recipe="r",result="failed",rung="regate"} 1`,
		`sglprov_remediation_total{recipe="r",result="ok",rung="next_profile"} 1`,
		`sglprov_node_health{recipe="r",state="healthy"} 1`,
	} {
		if !strings.Contains(tf, w) {
			t.Errorf("metrics lack %s:\n%s", w, tf)
		}
	}
	if strings.Contains(tf, `rung="give_up"`) {
		t.Errorf("gave up although a profile passed:\n%s", tf)
	}
	if fmt.Sprint(hooks.runs) != "[on_healthy healthy on_unhealthy degraded on_healthy healthy]" {
		t.Errorf("hooks %v", hooks.runs)
	}
}

// Every rung failing: the node is unhealthy, the drain hook ran once, the generation rung
// was skipped as not available; once the cause is fixed a canary passes and the node is
// healthy again by itself, the undrain hook run.
func TestLadderGivesUpThenRecovers(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.MaxRestarts = 1
	o.FailuresBeforeRestart = 1
	o.Metrics = NewMetrics()
	rem := &remedies{n: n, active: "a", cands: []string{"a", "b"}, good: map[string]bool{}}
	o.Remedies = rem
	hooks := &hookLog{}
	o.Hook = hooks.hook
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	d.syncHooks(ctx)
	n.canaryOK = false
	d.Check(ctx) // restart
	d.syncHooks(ctx)
	d.Check(ctx) // regate fails, b fails, no other profile, no generation: give up
	d.syncHooks(ctx)
	if d.Health() != Unhealthy {
		t.Fatalf("health %s after every rung failed", d.Health())
	}
	if !strings.HasPrefix(d.reason, "every rung of the remediation ladder failed; last: profile b failed the gate") {
		t.Errorf("reason %q", d.reason)
	}
	tf := textfile(t, o.Metrics)
	for _, w := range []string{
		`sglprov_remediation_total{recipe="r",result="skipped",rung="previous_generation"} 1`,
		`sglprov_remediation_total{recipe="r",result="failed",rung="next_profile"} 1`,
		`sglprov_remediation_total{recipe="r",result="skipped",rung="next_profile"} 1`,
		`sglprov_remediation_total{recipe="r",result="ok",rung="give_up"} 1`,
		`sglprov_node_health{recipe="r",state="unhealthy"} 1`,
	} {
		if !strings.Contains(tf, w) {
			t.Errorf("metrics lack %s:\n%s", w, tf)
		}
	}
	// Still failing: after two more failed checks the ladder is climbed again (backoff 2,
	// 4, 8 ...), the node unhealthy throughout.
	for i := range 3 {
		d.Check(ctx)
		d.syncHooks(ctx)
		if d.Health() != Unhealthy {
			t.Errorf("check %d after giving up: health %s", i+1, d.Health())
		}
	}
	if n.restarts != 2 {
		t.Errorf("restarts %d after the ladder's second climb began, want 2", n.restarts)
	}
	n.mu.Lock()
	n.canaryOK = true // the cause is fixed
	n.mu.Unlock()
	d.Check(ctx)
	d.syncHooks(ctx)
	if d.Health() != Healthy {
		t.Errorf("health %s after the cause was fixed", d.Health())
	}
	want := "[on_healthy healthy on_unhealthy degraded on_healthy healthy]"
	if fmt.Sprint(hooks.runs) != want {
		t.Errorf("hooks %v, want %s (the drain hook once)", hooks.runs, want)
	}
}

// A server that dies (connection refused) fails the canary within one interval, not after
// the canary timeout (minutes); one the daemon just restarted gets the canary timeout.
func TestDeadServerSeenWithinOneInterval(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	url := srv.URL
	srv.Close()
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	const interval = 500 * time.Millisecond
	o.Interval = interval
	o.CanaryTimeout = time.Minute
	var waits []time.Duration
	o.Canary = func(ctx context.Context, notReady func(string), wait time.Duration) (time.Duration, error) {
		waits = append(waits, wait)
		_, err := gate.WaitReady(ctx, gate.Config{URL: url, ReadyTimeout: wait,
			PollInitial: 50 * time.Millisecond, Waiting: func(s gate.WaitStatus) { notReady(s.Last) }})
		return 0, err
	}
	o.FailuresBeforeRestart = 1
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	start := time.Now()
	d.Check(ctx)
	took := time.Since(start)
	t.Logf("a dead server failed the canary in %s (interval %s, canary timeout %s)", took.Round(time.Millisecond), interval, o.CanaryTimeout)
	if took > 3*interval || d.restarts != 1 {
		t.Errorf("canary took %s, %d restarts; want a failure within about one interval (%s) and a restart", took, d.restarts, interval)
	}
	if len(waits) != 1 || waits[0] != interval {
		t.Errorf("waits %v", waits)
	}
	// The next canary follows the daemon's own restart: the model may take minutes to load.
	ctx2, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	d.Check(ctx2)
	if len(waits) != 2 || waits[1] != o.CanaryTimeout {
		t.Errorf("after a restart the canary waited %v, want the canary timeout %s", waits, o.CanaryTimeout)
	}
}
