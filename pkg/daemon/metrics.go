package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sglprov/sglprov/pkg/buildinfo"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/smoke"
)

// Metrics are the daemon's Prometheus metrics, in their own registry. A nil *Metrics
// records nothing.
type Metrics struct {
	reg *prometheus.Registry

	applyResult   prometheus.Gauge
	applyExit     prometheus.Gauge
	applyTime     prometheus.Gauge
	applyDuration prometheus.Gauge
	stepDuration  *prometheus.GaugeVec
	stepResult    *prometheus.GaugeVec
	gatePass      prometheus.Gauge
	gateSkipped   prometheus.Gauge
	timeToReady   prometheus.Gauge
	canaryLatency prometheus.Gauge
	canaryFails   prometheus.Counter
	canaryRuns    prometheus.Counter
	restarts      prometheus.Counter
	health        *prometheus.GaugeVec
	reboot        prometheus.Gauge

	mu        sync.Mutex
	curHealth Health // for /healthz
}

// NewMetrics returns the daemon's metrics in a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sglprov", Name: name, Help: help})
		m.reg.MustRegister(x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sglprov", Name: name, Help: help})
		m.reg.MustRegister(x)
		return x
	}
	m.applyResult = g("apply_success", "1 when the last apply succeeded, else 0.")
	m.applyExit = g("apply_exit_code", "Exit code of the last apply.")
	m.applyTime = g("apply_last_timestamp_seconds", "When the last apply started (Unix time).")
	m.applyDuration = g("apply_duration_seconds", "How long the last apply took.")
	m.stepDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sglprov", Name: "step_duration_seconds",
		Help: "How long each step took in the last apply (0 when skipped)."}, []string{"step"})
	m.stepResult = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sglprov", Name: "step_ok",
		Help: "1 when the step succeeded or was skipped as intact in the last apply."}, []string{"step"})
	m.reg.MustRegister(m.stepDuration, m.stepResult)
	m.gatePass = g("gate_pass", "1 when the smoke gate passed in the last apply.")
	m.gateSkipped = g("gate_skipped", "1 when the last apply skipped the smoke gate (--root: nothing was started); gate_pass is 0 then.")
	m.timeToReady = g("time_to_ready_seconds", "Seconds the service took to become ready in the last gate.")
	m.canaryLatency = g("canary_latency_seconds", "Latency of the last canary smoke case.")
	m.canaryFails = c("canary_failures_total", "Canary smoke cases that failed.")
	m.canaryRuns = c("canary_runs_total", "Canary smoke cases run.")
	m.restarts = c("service_restarts_total", "Service restarts after repeated canary failures.")
	m.health = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sglprov", Name: "node_health",
		Help: "1 for the node's current health state, 0 for the others."}, []string{"state"})
	m.reg.MustRegister(m.health)
	m.reboot = g("reboot_required", "1 when NVML reports a driver/library mismatch.")
	m.reg.MustRegister(buildInfoGauge(buildinfo.Read()))
	return m
}

// buildInfoGauge is sglprov_build_info: always 1, with the build's version, commit,
// commit time and modified flag as labels (those of `sglprov version`).
func buildInfoGauge(info buildinfo.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sglprov", Name: "build_info",
		Help: "Always 1; the labels say which build of sglprov runs.", ConstLabels: info.Labels()})
	g.Set(1)
	return g
}

// Registry returns the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Serve serves /metrics and /healthz on addr (a loopback address) until the listener
// fails; it returns the bound address. /healthz answers 200 while the daemon runs (it is
// the daemon's liveness, not the node's): its body names the node's health, e.g.
// "ok node_health=degraded".
func (m *Metrics) Serve(addr string) (net.Addr, func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", m.healthz)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the daemon goes on without metrics
		}
	}()
	return ln.Addr(), srv.Close, nil
}

// WriteTextfile writes the metrics for node_exporter's textfile collector (atomically),
// making its folder first (mode 0755, for the collector to read) where the host has none
// yet.
func (m *Metrics) WriteTextfile(path string) error {
	if m == nil || path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("making the metrics textfile's folder: %w", err)
	}
	if err := prometheus.WriteToTextfile(path, m.reg); err != nil {
		return fmt.Errorf("writing metrics textfile: %w", err)
	}
	return nil
}

func (m *Metrics) observeApply(rep *engine.Report, err error) {
	if m == nil {
		return
	}
	code := engine.ExitCode(err)
	m.applyExit.Set(float64(code))
	if err == nil {
		m.applyResult.Set(1)
	} else {
		m.applyResult.Set(0)
	}
	if rep == nil {
		return
	}
	m.applyTime.Set(float64(rep.Started.Unix()))
	m.applyDuration.Set(rep.Duration.Seconds())
	gateRan := false
	for _, s := range rep.Steps {
		m.stepDuration.WithLabelValues(s.Name).Set(s.Duration.Seconds())
		// A skipped gate did not run (it runs on every apply unless it cannot): not ok.
		ok := 0.0
		if s.Result == engine.ResultOK || s.Result == engine.ResultSkipped && s.Kind != "smoke" {
			ok = 1
		}
		m.stepResult.WithLabelValues(s.Name).Set(ok)
		if s.Kind == "smoke" && s.Result != engine.ResultNotSelected {
			gateRan = true
			// The gate runs on every apply: skipped means it did not run at all
			// (offline), which is not a pass.
			skipped := s.Result == engine.ResultSkipped
			m.gateSkipped.Set(b2f(skipped))
			m.gatePass.Set(b2f(s.Result == engine.ResultOK))
			if ttr, found := timeToReady(s.Details); found {
				m.timeToReady.Set(ttr.Seconds())
			}
		}
	}
	if !gateRan && code == engine.ExitGate {
		m.gatePass.Set(0)
	}
}

// timeToReady takes the gate's time-to-ready from a smoke step's report details.
func timeToReady(details map[string]any) (time.Duration, bool) {
	if r, ok := details["smoke"].(*smoke.Result); ok && r.Ready {
		return r.TimeToReady, true
	}
	return 0, false
}

func (m *Metrics) observeCanary(lat time.Duration, err error) {
	if m == nil {
		return
	}
	m.canaryRuns.Inc()
	m.canaryLatency.Set(lat.Seconds())
	if err != nil {
		m.canaryFails.Inc()
	}
}

func (m *Metrics) incRestarts() {
	if m != nil {
		m.restarts.Inc()
	}
}

func (m *Metrics) healthz(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	h := m.curHealth
	m.mu.Unlock()
	if h == "" {
		h = "starting"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "ok node_health=%s\n", h)
}

func (m *Metrics) setHealth(h Health) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.curHealth = h
	m.mu.Unlock()
	for _, s := range []Health{Healthy, Degraded, Unhealthy, RebootRequired, ApplyFailed} {
		v := 0.0
		if s == h {
			v = 1
		}
		m.health.WithLabelValues(string(s)).Set(v)
	}
}

func (m *Metrics) setRebootRequired(b bool) {
	if m == nil {
		return
	}
	if b {
		m.reboot.Set(1)
	} else {
		m.reboot.Set(0)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
