package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
				{Name: "smoke", Kind: "smoke", Result: engine.ResultOK, Duration: 2 * time.Second},
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
		Canary: func(ctx context.Context) (time.Duration, error) {
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

	seen := map[string]bool{}
	buf := make([]byte, 4096)
	deadline := time.Now().Add(10 * time.Second)
	for !(seen["READY=1"] && seen["WATCHDOG=1"] && seen["STATUS=healthy"]) && time.Now().Before(deadline) {
		conn.SetReadDeadline(time.Now().Add(time.Second))
		k, err := conn.Read(buf)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(buf[:k]), "\n") {
			seen[line] = true
		}
	}
	for _, want := range []string{"STATUS=applying the recipe", "READY=1", "WATCHDOG=1", "STATUS=healthy"} {
		if !seen[want] {
			t.Errorf("no %q among the notifications %v", want, seen)
		}
	}
	// Wait for a canary round, then scrape.
	time.Sleep(60 * time.Millisecond)
	fams := scrape(t, fmt.Sprintf("http://%s/metrics", addr))
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	for name, want := range map[string]float64{
		"sglprov_apply_success":                       1,
		"sglprov_apply_exit_code":                     0,
		"sglprov_gate_pass":                           1,
		"sglprov_canary_latency_seconds":              0.007,
		`sglprov_node_health{state="healthy"}`:        1,
		`sglprov_step_duration_seconds{step="smoke"}`: 2,
		"sglprov_reboot_required":                     0,
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
	if fams["sglprov_canary_runs_total"] < 1 {
		t.Errorf("no canary ran: %v", fams["sglprov_canary_runs_total"])
	}
}

func TestTextfile(t *testing.T) {
	m := NewMetrics()
	m.observeApply(&engine.Report{Started: time.Unix(1700000000, 0)}, fmt.Errorf("x: %w", engine.ErrGate))
	path := filepath.Join(t.TempDir(), "sglprov.prom")
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{"sglprov_apply_exit_code 3", "sglprov_apply_success 0", "sglprov_gate_pass 0", "sglprov_apply_last_timestamp_seconds 1.7e+09"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("textfile lacks %q:\n%s", want, b)
		}
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
