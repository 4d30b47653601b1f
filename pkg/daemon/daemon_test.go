package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"charm.land/log/v2"
	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// node is a fake node: its driver, whether its canary passes, and what the daemon did.
type node struct {
	mu       sync.Mutex
	driver   string
	mismatch bool
	canaryOK bool
	applies  []string
	restarts int
}

func (n *node) options() Options {
	return Options{
		Apply: func(ctx context.Context) (*engine.Report, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.applies = append(n.applies, n.driver)
			return &engine.Report{Started: time.Now(), Steps: []*engine.StepReport{
				{Name: "build", Kind: "build", Result: engine.ResultSkipped},
				{Name: "smoke", Kind: "smoke", Gate: true, Result: engine.ResultOK, Duration: 2 * time.Second},
			}}, nil
		},
		Detect: func(ctx context.Context) (*gpu.Facts, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.mismatch {
				return nil, &gpu.MismatchError{ModuleVersion: "580.95.05", LibraryVersion: "590.44.01"}
			}
			return &gpu.Facts{DriverVersion: n.driver}, nil
		},
		Canary: func(ctx context.Context, _ func(string), _ time.Duration) (time.Duration, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			if !n.canaryOK {
				return 5 * time.Millisecond, errors.New(`case arithmetic: degenerate content ("!!!!")`)
			}
			return 7 * time.Millisecond, nil
		},
		RestartService: func(ctx context.Context) error {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.restarts++
			return nil
		},
		FailuresBeforeRestart: 2,
		MaxRestarts:           2,
		Recipe:                "r",
		Log:                   log.New(io.Discard),
	}
}

func TestCheckRounds(t *testing.T) {
	tests := []struct {
		name         string
		steps        []func(n *node)
		wantHealth   []Health
		wantApplies  []string
		wantRestarts int
	}{
		{
			name:        "healthy node stays healthy",
			steps:       []func(*node){nil, nil},
			wantHealth:  []Health{Healthy, Healthy},
			wantApplies: []string{"580.95.05"},
		},
		{
			name: "driver change re-applies",
			steps: []func(*node){
				func(n *node) { n.driver = "590.44.01" },
				nil,
			},
			wantHealth:  []Health{Healthy, Healthy},
			wantApplies: []string{"580.95.05", "590.44.01"},
		},
		{
			name: "mismatch reports reboot required and touches nothing",
			steps: []func(*node){
				func(n *node) { n.mismatch = true; n.canaryOK = false },
				nil,
			},
			wantHealth:  []Health{RebootRequired, RebootRequired},
			wantApplies: []string{"580.95.05"},
		},
		{
			name: "failing canary restarts, then marks unhealthy",
			steps: []func(*node){
				func(n *node) { n.canaryOK = false },
				nil, // second failure: restart 1
				nil,
				nil, // restart 2
				nil,
				nil, // bound reached
			},
			wantHealth:   []Health{Degraded, Degraded, Degraded, Degraded, Degraded, Unhealthy},
			wantApplies:  []string{"580.95.05"},
			wantRestarts: 2,
		},
		{
			name: "canary recovers after a restart",
			steps: []func(*node){
				func(n *node) { n.canaryOK = false },
				nil,
				func(n *node) { n.canaryOK = true },
			},
			wantHealth:   []Health{Degraded, Degraded, Healthy},
			wantApplies:  []string{"580.95.05"},
			wantRestarts: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{driver: "580.95.05", canaryOK: true}
			o := n.options()
			o.Metrics = NewMetrics()
			d := New(o)
			d.apply(context.Background(), "start")
			d.driver = n.driver
			var got []Health
			for _, step := range tc.steps {
				if step != nil {
					n.mu.Lock()
					step(n)
					n.mu.Unlock()
				}
				d.Check(context.Background())
				got = append(got, d.Health())
			}
			if diff := cmp.Diff(tc.wantHealth, got); diff != "" {
				t.Errorf("health (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantApplies, n.applies); diff != "" {
				t.Errorf("applies (-want +got):\n%s", diff)
			}
			if n.restarts != tc.wantRestarts {
				t.Errorf("restarts = %d, want %d", n.restarts, tc.wantRestarts)
			}
		})
	}
}

// A failed apply is retried at the next check, then less and less often (every 2, 4, 8...
// checks, at most every 64): a step that keeps failing (a 401 from the hub, a build that
// breaks after 40 minutes) is not redone back to back for the life of the daemon. A
// passing retry ends the backoff; a changed driver applies at once whatever it says.
func TestFailedApplyRetriesBackOff(t *testing.T) {
	var applies int
	failing := true
	o := Options{Apply: func(ctx context.Context) (*engine.Report, error) {
		applies++
		if failing {
			return &engine.Report{Started: time.Now()}, fmt.Errorf("step weights: %w", errors.New("HTTP 401"))
		}
		return &engine.Report{Started: time.Now()}, nil
	}}
	d := New(o)
	d.apply(context.Background(), "start")
	var at []int // the checks that applied
	for i := 1; i <= 16; i++ {
		before := applies
		d.Check(context.Background())
		if applies > before {
			at = append(at, i)
		}
		if d.Health() != ApplyFailed {
			t.Fatalf("check %d: health %s, want %s", i, d.Health(), ApplyFailed)
		}
	}
	if diff := cmp.Diff([]int{1, 3, 7, 15}, at); diff != "" {
		t.Errorf("checks that retried the apply (-want +got):\n%s", diff)
	}
	failing = false
	for i := 0; i < 16 && d.Health() != Healthy; i++ {
		d.Check(context.Background())
	}
	if d.Health() != Healthy {
		t.Fatalf("health %s after the cause was fixed, want healthy", d.Health())
	}
	failing = true
	d.apply(context.Background(), "driver changed")
	before := applies
	d.Check(context.Background())
	if applies != before+1 {
		t.Errorf("after a first failure since the last success, the next check did not retry (%d applies, want %d)", applies, before+1)
	}
}

// TestRunNotifiesAndServesMetrics runs the daemon loop with a real sd_notify socket and
// scrapes its metrics endpoint.
func TestRunNotifiesAndServesMetrics(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)

	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	o.Interval = 20 * time.Millisecond
	o.WatchdogInterval = 10 * time.Millisecond
	o.Notify = func(s string) error { _, err := sddaemon.SdNotify(false, s); return err }
	addr, stop, err := o.Metrics.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(o).Run(ctx) }()

	// The socket is read until the test ends, as systemd reads it: a datagram socket
	// nobody reads fills, and the daemon's next notification would block its loop (and
	// Run would never return).
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return // closed at the test's end
			}
			mu.Lock()
			for _, line := range strings.Split(string(buf[:k]), "\n") {
				seen[line] = true
			}
			mu.Unlock()
		}
	}()
	has := func(want ...string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range want {
			if !seen[w] {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !has("READY=1", "WATCHDOG=1", "STATUS=healthy") && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	for _, want := range []string{"STATUS=applying the recipe", "READY=1", "WATCHDOG=1", "STATUS=healthy"} {
		if !has(want) {
			mu.Lock()
			t.Errorf("no %q among the notifications %v", want, seen)
			mu.Unlock()
		}
	}
	// Wait for a canary round, then scrape.
	time.Sleep(60 * time.Millisecond)
	fams := scrape(t, fmt.Sprintf("http://%s/metrics", addr))
	resp, err := http.Get(fmt.Sprintf("http://%s/healthz", addr))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok node_health=healthy\n" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	for name, want := range map[string]float64{
		`sglprov_apply_success{recipe="r"}`:                       1,
		`sglprov_apply_exit_code{recipe="r"}`:                     0,
		`sglprov_gate_pass{recipe="r"}`:                           1,
		`sglprov_canary_latency_seconds{recipe="r"}`:              0.007,
		`sglprov_node_health{recipe="r",state="healthy"}`:         1,
		`sglprov_node_health{recipe="r",state="apply_failed"}`:    0,
		`sglprov_node_health{recipe="r",state="reboot_required"}`: 0,
		`sglprov_step_duration_seconds{recipe="r",step="smoke"}`:  2,
		`sglprov_reboot_required{recipe="r"}`:                     0,
		`sglprov_daemon_up`:                                       1,
	} {
		got, ok := fams[name]
		if !ok {
			t.Errorf("metric %s missing", name)
			continue
		}
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// The endpoint's heartbeat moves without a textfile too (an alert on a stale daemon
	// must not fire on one that only serves /metrics).
	if hb := fams["sglprov_heartbeat_timestamp_seconds"]; hb < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("heartbeat %v, want about now", hb)
	}
	if fams[`sglprov_canary_runs_total{recipe="r"}`] < 1 {
		t.Errorf("no canary ran: %v", fams[`sglprov_canary_runs_total{recipe="r"}`])
	}
}

func TestTextfile(t *testing.T) {
	m := NewMetrics()
	m.ObserveApply("r", &engine.Report{Started: time.Unix(1700000000, 0)}, fmt.Errorf("x: %w", exitcode.ErrGate))
	path := filepath.Join(t.TempDir(), "sglprov.prom")
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{`sglprov_apply_exit_code{recipe="r"} 3`, `sglprov_apply_success{recipe="r"} 0`, `sglprov_gate_pass{recipe="r"} 0`, `sglprov_apply_last_timestamp_seconds{recipe="r"} 1.7e+09`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("textfile lacks %q:\n%s", want, b)
		}
	}
}

// The shipped unit writes its textfile to /var/lib/prometheus/node-exporter/, which a fresh
// host without node_exporter does not have: the folder is made (readable by the collector)
// rather than a warning logged at every check for the life of the daemon.
func TestTextfileMakesItsFolder(t *testing.T) {
	m := NewMetrics()
	dir := filepath.Join(t.TempDir(), "var", "lib", "prometheus", "node-exporter")
	path := filepath.Join(dir, "sglprov.prom")
	if err := m.WriteTextfile(path); err != nil {
		t.Fatalf("writing the textfile where its folder does not exist yet: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "sglprov_build_info") {
		t.Fatalf("textfile: %v\n%s", err, b)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("folder made with %v (%v), want 0755", fi.Mode(), err)
	}
}

// scrape fetches and parses a Prometheus text exposition into name{labels} -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			key := name
			if len(m.Label) > 0 {
				var parts []string
				for _, l := range m.Label {
					parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				key += "{" + strings.Join(parts, ",") + "}"
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

// TestStopCancelsCanary stops the daemon while its canary waits: the canary is cut short,
// counted neither as a run nor as a failure, and the service is not restarted.
func TestStopCancelsCanary(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	o.Interval = 10 * time.Millisecond
	o.FailuresBeforeRestart = 1
	started := make(chan struct{}, 1)
	o.Canary = func(ctx context.Context, _ func(string), _ time.Duration) (time.Duration, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return time.Second, fmt.Errorf("waiting for readiness: %w", context.Cause(ctx))
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	d := New(o)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-started
	cancel(errors.New("signal received: terminated"))
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n.restarts != 0 || d.Health() != Stopped {
		t.Errorf("after a stop: %d restarts, health %s", n.restarts, d.Health())
	}
	path := filepath.Join(t.TempDir(), "m.prom")
	o.Metrics.WriteTextfile(path)
	b, _ := os.ReadFile(path)
	for _, want := range []string{`sglprov_canary_failures_total{recipe="r"} 0`, `sglprov_canary_runs_total{recipe="r"} 0`, `sglprov_service_restarts_total{recipe="r"} 0`,
		`sglprov_node_health{recipe="r",state="stopped"} 1`, `sglprov_node_health{recipe="r",state="healthy"} 0`, "sglprov_daemon_up 0"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q:\n%s", want, b)
		}
	}
}

// TestHealthLeavesHealthyWhenServerDies runs the daemon with a canary that waits on a
// real server through the gate's readiness wait (up to a minute): once the server is
// gone, node_health leaves healthy within one interval, long before the wait gives up.
func TestHealthLeavesHealthyWhenServerDies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	url := srv.URL
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	// A second: far below the minutes it took before, and far above a loaded machine's
	// scheduling delays.
	const interval = time.Second
	o.Interval = interval
	o.Canary = func(ctx context.Context, notReady func(string), _ time.Duration) (time.Duration, error) {
		_, err := gate.WaitReady(ctx, gate.Config{URL: url, ReadyTimeout: time.Minute,
			PollInitial: 50 * time.Millisecond, Waiting: func(s gate.WaitStatus) { notReady(s.Last) }})
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := New(o)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	time.Sleep(interval + interval/2) // one canary passed
	if h := d.Health(); h != Healthy {
		t.Fatalf("health %s before the server died", h)
	}
	srv.Close()
	died := time.Now()
	for d.Health() == Healthy && time.Since(died) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(died)
	t.Logf("node_health left healthy %s after the server died (interval %s)", took.Round(time.Millisecond), interval)
	if d.Health() != Degraded || took > interval+interval/2 {
		t.Errorf("health %s %s after the server died; want degraded within one interval (%s)", d.Health(), took, interval)
	}
	cancel()
	<-done
}

// TestSkippedGateIsNotAPass: an apply whose gate was skipped (--root) is not reported as a
// passing gate.
func TestSkippedGateIsNotAPass(t *testing.T) {
	m := NewMetrics()
	m.ObserveApply("r", &engine.Report{Started: time.Unix(1700000000, 0), Steps: []*engine.StepReport{
		{Name: "unit", Kind: "systemd", Result: engine.ResultSkipped, Reason: "unchanged"},
		{Name: "smoke", Kind: "smoke", Gate: true, Result: engine.ResultSkipped, Reason: "offline (--root): no server was started"},
	}}, nil)
	path := filepath.Join(t.TempDir(), "m.prom")
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{`sglprov_gate_pass{recipe="r"} 0`, `sglprov_gate_skipped{recipe="r"} 1`, `sglprov_step_ok{recipe="r",step="smoke"} 0`, `sglprov_step_ok{recipe="r",step="unit"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q:\n%s", want, b)
		}
	}
}
