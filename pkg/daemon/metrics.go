package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/buildinfo"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/fitness"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/smoke"
)

// Metrics are sglprov's Prometheus metrics, in their own registry. Every series of a
// recipe carries its `recipe` label, so that one endpoint (or one textfile) serves every
// recipe of the node. A nil *Metrics records nothing.
type Metrics struct {
	reg    *prometheus.Registry
	daemon bool // the daemon's own series are registered (canary, health, ladder)

	applyResult   gaugeVec
	applyExit     gaugeVec
	applyTime     gaugeVec
	applyDuration gaugeVec
	applyRefused  gaugeVec
	stepDuration  gaugeVec
	stepResult    gaugeVec
	gatePass      gaugeVec
	gateSkipped   gaugeVec
	timeToReady   gaugeVec
	gateDecode    gaugeVec
	gateTTFT      gaugeVec
	nodeInfo      gaugeVec
	heartbeat     prometheus.Gauge

	canaryLatency  gaugeVec
	canaryFails    counterVec
	canaryRuns     counterVec
	restarts       counterVec
	serverRestarts gaugeVec
	remediation    counterVec
	hooks          counterVec
	health         gaugeVec
	ready          gaugeVec
	reboot         gaugeVec
	switchFailed   gaugeVec
	switching      gaugeVec
	up             prometheus.Gauge

	names []string // every family's name, for Names
	gpu   *gpuCollector

	mu     sync.Mutex
	states map[string]*recipeState // by recipe: what /healthz and /readyz answer from
	now    func() time.Time
}

// recipeState is what the health endpoints know of one recipe.
type recipeState struct {
	health Health
	reason string
	ready  bool
	// pending is set while a change is pending because its switch failed (the node
	// serves what it served before): why.
	pending string
	// switching is, while a switch of the recipe's service runs, the address of its
	// served port ("host:port"); "" otherwise. /healthz and /readyz answer from that port
	// meanwhile.
	switching, switchUnit string
}

// Labels of sglprov_node_info, in order.
var nodeInfoLabels = []string{"recipe", "model", "served_name", "unit", "profile", "generation", "sglang_commit"}

// NodeInfo is what sglprov_node_info says of a recipe's node: which model it serves, under
// which name and unit, with which profile, generation and SGLang commit ("" where unknown).
type NodeInfo struct {
	Recipe, Model, ServedName, Unit, Profile, Generation, SGLangCommit string
}

func (n NodeInfo) values() []string {
	return []string{n.Recipe, n.Model, n.ServedName, n.Unit, n.Profile, n.Generation, n.SGLangCommit}
}

// NewApplyMetrics returns the metrics of a one-shot run (apply, a refused plan): the
// apply's outcome, its steps, the gate, the node's info, the build and the heartbeat.
func NewApplyMetrics() *Metrics { return newMetrics(false) }

// NewMetrics returns the daemon's metrics: those of NewApplyMetrics, and the canary, the
// node's health and readiness, the remediation ladder, the hooks and the daemon's liveness.
func NewMetrics() *Metrics { return newMetrics(true) }

func newMetrics(daemon bool) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), daemon: daemon, states: map[string]*recipeState{}, now: time.Now}
	gv := func(name, help string, labels ...string) gaugeVec {
		x := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sglprov", Name: name, Help: help}, append([]string{"recipe"}, labels...))
		m.reg.MustRegister(x)
		m.names = append(m.names, "sglprov_"+name)
		return gaugeVec{x}
	}
	cv := func(name, help string, labels ...string) counterVec {
		x := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sglprov", Name: name, Help: help}, append([]string{"recipe"}, labels...))
		m.reg.MustRegister(x)
		m.names = append(m.names, "sglprov_"+name)
		return counterVec{x}
	}
	m.applyResult = gv("apply_success", "1 when the last apply succeeded, else 0.")
	m.applyExit = gv("apply_exit_code", "Exit code of the last apply (4 or 6 when it was refused before any step ran).")
	m.applyTime = gv("apply_last_timestamp_seconds", "When the last apply started (Unix time).")
	m.applyDuration = gv("apply_duration_seconds", "How long the last apply took.")
	m.applyRefused = gv("apply_refused", "1 when the last apply was refused before any step ran (host short of the recipe, reboot required).")
	m.stepDuration = gv("step_duration_seconds", "How long each step took in the last apply (0 when skipped).", "step")
	m.stepResult = gv("step_ok", "1 when the step succeeded or was skipped as intact in the last apply.", "step")
	m.gatePass = gv("gate_pass", "1 when the smoke gate passed in the last apply.")
	m.gateSkipped = gv("gate_skipped", "1 when the last apply skipped the smoke gate (--root: nothing was started); gate_pass is 0 then.")
	m.timeToReady = gv("time_to_ready_seconds", "Seconds the service took to become ready in the last gate.")
	m.gateDecode = gv("gate_decode_tokens_per_second", "Median decode speed the last gate measured, per case kind (kind all: every answer).", "kind")
	m.gateTTFT = gv("gate_ttft_seconds", "Median time to the first token of the last gate's streamed answers, per case kind (kind all: every one).", "kind")
	m.nodeInfo = gaugeVec{prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sglprov", Name: "node_info",
		Help: "Always 1; the labels say what the recipe's node serves."}, nodeInfoLabels)}
	m.reg.MustRegister(m.nodeInfo)
	m.names = append(m.names, "sglprov_node_info", "sglprov_heartbeat_timestamp_seconds", "sglprov_build_info")
	m.heartbeat = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sglprov", Name: "heartbeat_timestamp_seconds",
		Help: "When sglprov last wrote these metrics (Unix time): a textfile that stops moving is stale."})
	m.reg.MustRegister(m.heartbeat)
	m.reg.MustRegister(buildInfoGauge(buildinfo.Read()))
	if !daemon {
		return m
	}
	m.canaryLatency = gv("canary_latency_seconds", "Latency of the last canary smoke case.")
	m.canaryFails = cv("canary_failures_total", "Canary smoke cases that failed, and deaths of the model server between two canaries (restarted by its service manager) that no canary saw fail.")
	m.canaryRuns = cv("canary_runs_total", "Canary smoke cases run.")
	m.restarts = cv("service_restarts_total", "Service restarts the daemon made after repeated canary failures.")
	m.serverRestarts = gv("server_restarts", "Times the exec supervisor restarted the model server after it died, since the daemon's last apply started it.")
	m.remediation = cv("remediation_total", "Rungs of the remediation ladder climbed, by rung and result (ok, failed, skipped).", "rung", "result")
	m.hooks = cv("hook_runs_total", "Drain and undrain hooks run, by hook and result (ok, failed).", "hook", "result")
	m.health = gv("node_health", "1 for the node's current health state, 0 for the others.", "state")
	m.ready = gv("ready", "1 once the first gate of the daemon passed (what /readyz answers).")
	m.reboot = gv("reboot_required", "1 when NVML reports a driver/library mismatch.")
	m.switchFailed = gv("switch_pending_failed", "1 while a change of the recipe is pending because its switch failed the gate and what served before serves again; it is tried again when the recipe or the facts change.")
	m.switching = gv("switch_in_progress", "1 while a switch of the recipe's service runs (a candidate is staged and gated; what served before may be stopped): /healthz answers 503 meanwhile while the served port refuses connections.")
	m.gpu = newGPUCollector()
	m.reg.MustRegister(m.gpu)
	m.names = append(m.names, fitness.CounterNames()...)
	m.up = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sglprov", Name: "daemon_up",
		Help: "1 while the daemon runs; 0 in the final textfile it writes as it stops."})
	m.reg.MustRegister(m.up)
	m.names = append(m.names, "sglprov_daemon_up")
	return m
}

// labelValue makes s a label value Prometheus accepts: the exposition formats require
// valid UTF-8, and client_golang panics on anything else, so each invalid byte (of a
// served name or a path given on the command line, a GPU name a driver reports) becomes
// U+FFFD, the replacement character.
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// validValues is labelValue of each of vs.
func validValues(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = labelValue(v)
	}
	return out
}

// gaugeVec is a GaugeVec whose label values are made valid first (labelValue).
type gaugeVec struct{ *prometheus.GaugeVec }

// WithLabelValues is the GaugeVec's, with each value made valid.
func (v gaugeVec) WithLabelValues(lvs ...string) prometheus.Gauge {
	return v.GaugeVec.WithLabelValues(validValues(lvs)...)
}

// DeletePartialMatch is the GaugeVec's, with each value made valid.
func (v gaugeVec) DeletePartialMatch(labels prometheus.Labels) int {
	return v.GaugeVec.DeletePartialMatch(validLabels(labels))
}

// counterVec is a CounterVec whose label values are made valid first (labelValue).
type counterVec struct{ *prometheus.CounterVec }

// WithLabelValues is the CounterVec's, with each value made valid.
func (v counterVec) WithLabelValues(lvs ...string) prometheus.Counter {
	return v.CounterVec.WithLabelValues(validValues(lvs)...)
}

func validLabels(labels prometheus.Labels) prometheus.Labels {
	out := make(prometheus.Labels, len(labels))
	for k, v := range labels {
		out[k] = labelValue(v)
	}
	return out
}

// buildInfoGauge is sglprov_build_info: always 1, with the build's version, commit,
// commit time and modified flag as labels (those of `sglprov version`).
func buildInfoGauge(info buildinfo.Info) prometheus.Gauge {
	labels := info.Labels()
	for k, v := range labels {
		labels[k] = labelValue(v)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sglprov", Name: "build_info",
		Help: "Always 1; the labels say which build of sglprov runs.", ConstLabels: labels})
	g.Set(1)
	return g
}

// Registry returns the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Names returns the names of every metric family these metrics export, sorted (for the
// dashboard's and the alert rules' tests).
func (m *Metrics) Names() []string {
	out := append([]string(nil), m.names...)
	sort.Strings(out)
	return out
}

// SetNodeInfo sets sglprov_node_info for info.Recipe, replacing the recipe's earlier one.
func (m *Metrics) SetNodeInfo(info NodeInfo) {
	if m == nil {
		return
	}
	m.nodeInfo.DeletePartialMatch(prometheus.Labels{"recipe": info.Recipe})
	m.nodeInfo.WithLabelValues(info.values()...).Set(1)
}

// Serve serves /metrics, /healthz and /readyz on addr until the listener fails; it
// returns the bound address.
func (m *Metrics) Serve(addr string) (net.Addr, func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", m.healthz)
	mux.HandleFunc("/readyz", m.readyz)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the daemon goes on without metrics
		}
	}()
	return ln.Addr(), srv.Close, nil
}

// WriteTextfile writes the metrics for node_exporter's textfile collector, as its docs
// ask: to a temporary file in the same folder, renamed over path (atomicfile: fsynced, a
// name the collector's *.prom glob does not match), mode 0644 for the collector to read.
// It makes the folder first (mode 0755) where the host has none yet, and sets the
// heartbeat to now.
func (m *Metrics) WriteTextfile(path string) error {
	if m == nil || path == "" {
		return nil
	}
	m.beat()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("making the metrics textfile's folder: %w", err)
	}
	fams, err := m.reg.Gather()
	if err != nil {
		return fmt.Errorf("gathering metrics: %w", err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			return fmt.Errorf("encoding metrics: %w", err)
		}
	}
	if err := atomicfile.Write(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing metrics textfile: %w", err)
	}
	// atomicfile's temporary file takes the process's umask; the collector needs to read.
	if err := os.Chmod(path, 0o644); err != nil {
		return fmt.Errorf("writing metrics textfile: %w", err)
	}
	return nil
}

// beat sets the heartbeat to now.
func (m *Metrics) beat() {
	if m != nil {
		m.heartbeat.Set(float64(m.now().UnixMilli()) / 1000)
	}
}

// ObserveApply records an apply's outcome for recipe: rep may be nil (a run refused before
// it started, err says why).
func (m *Metrics) ObserveApply(recipe string, rep *engine.Report, err error) {
	if m == nil {
		return
	}
	code := exitcode.Of(err)
	m.applyExit.WithLabelValues(recipe).Set(float64(code))
	m.applyResult.WithLabelValues(recipe).Set(b2f(err == nil))
	refused := rep == nil && engine.Refused(err) || rep != nil && rep.Result == engine.ResultRefused
	m.applyRefused.WithLabelValues(recipe).Set(b2f(refused))
	if rep == nil {
		m.applyTime.WithLabelValues(recipe).Set(float64(m.now().Unix()))
		return
	}
	m.applyTime.WithLabelValues(recipe).Set(float64(rep.Started.Unix()))
	m.applyDuration.WithLabelValues(recipe).Set(rep.Duration.Seconds())
	if refused {
		// Nothing ran: the steps' and the gate's series of an earlier run would lie.
		m.stepDuration.DeletePartialMatch(prometheus.Labels{"recipe": recipe})
		m.stepResult.DeletePartialMatch(prometheus.Labels{"recipe": recipe})
		m.gatePass.WithLabelValues(recipe).Set(0)
		return
	}
	gateRan := false
	for _, s := range rep.Steps {
		m.stepDuration.WithLabelValues(recipe, s.Name).Set(s.Duration.Seconds())
		// A skipped gate did not run (it runs on every apply unless it cannot): not ok.
		ok := s.Result == engine.ResultOK || s.Result == engine.ResultSkipped && !s.Gate
		m.stepResult.WithLabelValues(recipe, s.Name).Set(b2f(ok))
		if s.Gate && s.Result != engine.ResultNotSelected {
			gateRan = true
			// The gate runs on every apply: skipped means it did not run at all
			// (offline), which is not a pass.
			m.gateSkipped.WithLabelValues(recipe).Set(b2f(s.Result == engine.ResultSkipped))
			m.gatePass.WithLabelValues(recipe).Set(b2f(s.Result == engine.ResultOK))
			if ttr, found := timeToReady(s.Details); found {
				m.timeToReady.WithLabelValues(recipe).Set(ttr.Seconds())
			}
			m.observePerf(recipe, s.Details)
		}
	}
	if !gateRan && code == exitcode.ExitGate {
		m.gatePass.WithLabelValues(recipe).Set(0)
	}
}

// observePerf records the gate's speed figures, when it measured any.
func (m *Metrics) observePerf(recipe string, details map[string]any) {
	r, ok := smoke.ResultOf(details)
	if !ok || r.Perf == nil {
		return
	}
	m.gateDecode.DeletePartialMatch(prometheus.Labels{"recipe": recipe})
	m.gateTTFT.DeletePartialMatch(prometheus.Labels{"recipe": recipe})
	m.gateDecode.WithLabelValues(recipe, "all").Set(r.Perf.DecodeTPS)
	m.gateTTFT.WithLabelValues(recipe, "all").Set(r.Perf.TTFT.Seconds())
	for kind, p := range r.Perf.Kinds {
		m.gateDecode.WithLabelValues(recipe, kind).Set(p.DecodeTPS)
		m.gateTTFT.WithLabelValues(recipe, kind).Set(p.TTFT.Seconds())
	}
}

// timeToReady takes the gate's time-to-ready from a smoke step's report details.
func timeToReady(details map[string]any) (time.Duration, bool) {
	if r, ok := smoke.ResultOf(details); ok && r.Ready {
		return r.TimeToReady, true
	}
	return 0, false
}

// recipeMetrics are the daemon's series of one recipe. A nil *recipeMetrics records
// nothing.
type recipeMetrics struct {
	m      *Metrics
	recipe string
}

// forRecipe returns the daemon's series of recipe, with their zero values set so that a
// counter that never moved is exported (and alert rules see 0, not nothing).
func (m *Metrics) forRecipe(recipe string) *recipeMetrics {
	if m == nil || !m.daemon {
		return nil
	}
	m.canaryFails.WithLabelValues(recipe)
	m.canaryRuns.WithLabelValues(recipe)
	m.restarts.WithLabelValues(recipe)
	m.serverRestarts.WithLabelValues(recipe)
	m.ready.WithLabelValues(recipe)
	m.reboot.WithLabelValues(recipe)
	m.up.Set(1)
	return &recipeMetrics{m: m, recipe: recipe}
}

func (r *recipeMetrics) observeApply(rep *engine.Report, err error) {
	if r != nil {
		r.m.ObserveApply(r.recipe, rep, err)
	}
}

func (r *recipeMetrics) observeCanary(lat time.Duration, err error) {
	if r == nil {
		return
	}
	r.m.canaryRuns.WithLabelValues(r.recipe).Inc()
	r.m.canaryLatency.WithLabelValues(r.recipe).Set(lat.Seconds())
	if err != nil {
		r.m.canaryFails.WithLabelValues(r.recipe).Inc()
	}
}

// canaryFailures counts n canary failures the canary did not see itself (deaths of the
// server between two canaries).
func (r *recipeMetrics) canaryFailures(n int) {
	if r != nil {
		r.m.canaryFails.WithLabelValues(r.recipe).Add(float64(n))
	}
}

func (r *recipeMetrics) incRestarts() {
	if r != nil {
		r.m.restarts.WithLabelValues(r.recipe).Inc()
	}
}

// SetServerRestarts records how many times the service manager restarted recipe's model
// server after it died (the exec supervisor's count since the daemon's last apply).
func (m *Metrics) SetServerRestarts(recipe string, n int) {
	if m != nil && m.daemon {
		m.serverRestarts.WithLabelValues(recipe).Set(float64(n))
	}
}

func (r *recipeMetrics) rung(rung, result string) {
	if r != nil {
		r.m.remediation.WithLabelValues(r.recipe, rung, result).Inc()
	}
}

func (r *recipeMetrics) hook(hook, result string) {
	if r != nil {
		r.m.hooks.WithLabelValues(r.recipe, hook, result).Inc()
	}
}

func (r *recipeMetrics) setReady() {
	if r == nil {
		return
	}
	r.m.ready.WithLabelValues(r.recipe).Set(1)
	r.m.mu.Lock()
	r.m.state(r.recipe).ready = true
	r.m.mu.Unlock()
}

// state returns recipe's health state, made on first use; m.mu is held.
func (m *Metrics) state(recipe string) *recipeState {
	s := m.states[recipe]
	if s == nil {
		s = &recipeState{}
		m.states[recipe] = s
	}
	return s
}

// allHealth are the states of sglprov_node_health, each exported as 0 or 1.
var allHealth = []Health{Healthy, Degraded, Unhealthy, RebootRequired, ApplyFailed, Stopped}

func (r *recipeMetrics) setHealth(h Health, reason string) {
	if r == nil {
		return
	}
	r.m.mu.Lock()
	s := r.m.state(r.recipe)
	s.health, s.reason = h, reason
	r.m.mu.Unlock()
	for _, st := range allHealth {
		r.m.health.WithLabelValues(r.recipe, string(st)).Set(b2f(st == h))
	}
}

// setSwitchFailed records a pending change whose switch failed (why), or none ("").
func (r *recipeMetrics) setSwitchFailed(why string) {
	if r == nil {
		return
	}
	r.m.mu.Lock()
	r.m.state(r.recipe).pending = why
	r.m.mu.Unlock()
	if r.m.switchFailed.GaugeVec != nil {
		r.m.switchFailed.WithLabelValues(r.recipe).Set(b2f(why != ""))
	}
}

// setSwitching records that a switch of unit runs, its clients reaching it at served, or
// that it ended (served "").
func (r *recipeMetrics) setSwitching(unit, served string) {
	if r == nil {
		return
	}
	r.m.mu.Lock()
	st := r.m.state(r.recipe)
	st.switching, st.switchUnit = served, unit
	r.m.mu.Unlock()
	if r.m.switching.GaugeVec != nil {
		r.m.switching.WithLabelValues(r.recipe).Set(b2f(served != ""))
	}
}

// probeTimeout bounds how long /healthz waits for the served port during a switch.
const probeTimeout = 500 * time.Millisecond

// refusing returns, for each recipe whose switch runs now, why its served port does not
// accept a connection ("" when it does): the port is dialled with each request, so
// /healthz follows what a client of the node finds.
func (m *Metrics) refusing() map[*recipeState]string {
	m.mu.Lock()
	addrs := map[*recipeState]string{}
	for _, s := range m.states {
		if s.switching != "" {
			addrs[s] = s.switching
		}
	}
	m.mu.Unlock()
	out := map[*recipeState]string{}
	for s, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, probeTimeout)
		if err != nil {
			out[s] = err.Error()
			continue
		}
		_ = c.Close()
		out[s] = ""
	}
	return out
}

// switchingLine judges a recipe whose switch runs (ok false when it does not): 503 while
// its served port refuses connections, else what its health says with the switch noted.
func switchingLine(s *recipeState, refused map[*recipeState]string, what string) (served bool, line string, ok bool) {
	why, switching := refused[s]
	if !switching {
		return false, "", false
	}
	if why != "" {
		return false, fmt.Sprintf("%s: a switch of %s is in progress and its served port %s refuses connections (%s)", what, s.switchUnit, s.switching, oneLine(why, "refused")), true
	}
	return true, "", true
}

func (r *recipeMetrics) setRebootRequired(b bool) {
	if r != nil {
		r.m.reboot.WithLabelValues(r.recipe).Set(b2f(b))
	}
}

// stopped records the daemon's end: daemon_up 0, every recipe's health "stopped" (a
// textfile written after this says the node is no longer watched).
func (m *Metrics) stopped() {
	if m == nil || !m.daemon {
		return
	}
	m.up.Set(0)
	m.mu.Lock()
	var names []string
	for name, s := range m.states {
		s.health, s.reason, s.ready = Stopped, "the daemon stopped", false
		names = append(names, name)
	}
	m.mu.Unlock()
	for _, name := range names {
		for _, st := range allHealth {
			m.health.WithLabelValues(name, string(st)).Set(b2f(st == Stopped))
		}
		m.ready.WithLabelValues(name).Set(0)
	}
}

// healthz is what a load balancer asks: 200 only while every recipe's node serves
// correct answers (health "healthy"), 503 otherwise, the body naming each recipe's health
// and, for one that is not healthy, why ("node_health=degraded: canary failed: ...").
func (m *Metrics) healthz(w http.ResponseWriter, _ *http.Request) {
	refused := m.refusing()
	m.answer(w, func(s *recipeState) (bool, string) {
		if ok, line, switching := switchingLine(s, refused, "node_health=switching"); switching && !ok {
			return false, line
		}
		note := ""
		if _, switching := refused[s]; switching {
			note = "; switch in progress (" + s.switchUnit + ")"
		}
		h := s.health
		if h == "" {
			return false, "node_health=starting: the first apply has not finished" + note
		}
		if h == Healthy {
			if s.pending != "" {
				return true, "node_health=healthy; change pending: " + oneLine(s.pending, "its switch failed") + note
			}
			return true, "node_health=healthy" + note
		}
		return false, fmt.Sprintf("node_health=%s: %s%s", h, oneLine(s.reason, h.Words()), note)
	})
}

// readyz answers 200 once the first gate of every recipe passed (an apply succeeded),
// and stays so; 503 before.
func (m *Metrics) readyz(w http.ResponseWriter, _ *http.Request) {
	refused := m.refusing()
	m.answer(w, func(s *recipeState) (bool, string) {
		if ok, line, switching := switchingLine(s, refused, "not ready"); switching && !ok {
			return false, line
		}
		if s.ready {
			return true, "ready"
		}
		if s.health == Stopped {
			return false, "not ready: the daemon stopped"
		}
		return false, "not ready: the first gate has not passed yet"
	})
}

// answer writes 200 when judge passes every recipe, else 503; one line per recipe
// ("RECIPE: ..."), or the one line alone for a single recipe, prefixed "ok " on 200.
func (m *Metrics) answer(w http.ResponseWriter, judge func(*recipeState) (bool, string)) {
	m.mu.Lock()
	names := make([]string, 0, len(m.states))
	for n := range m.states {
		names = append(names, n)
	}
	sort.Strings(names)
	all := len(names) > 0
	var lines []string
	for _, n := range names {
		ok, line := judge(m.states[n])
		all = all && ok
		if len(names) > 1 {
			line = n + ": " + line
		}
		lines = append(lines, line)
	}
	m.mu.Unlock()
	if len(names) == 0 {
		lines = []string{"node_health=starting: the first apply has not finished"}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	code, prefix := http.StatusServiceUnavailable, ""
	if all {
		code, prefix = http.StatusOK, "ok "
	}
	w.WriteHeader(code)
	fmt.Fprintf(w, "%s%s\n", prefix, strings.Join(lines, "\n"))
}

// oneLine is s on one line, at most 512 bytes; def when s is empty. The lines of s (a
// refusal lists one problem a line) are joined with "; ", so that they stay apart.
func oneLine(s, def string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			parts = append(parts, l)
		}
	}
	s = strings.Join(parts, "; ")
	s = strings.ReplaceAll(s, ":; ", ": ")
	if s == "" {
		return def
	}
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// setGPU records the facts a daemon check read for recipe, for the GPU counters.
func (m *Metrics) setGPU(recipe string, f *gpu.Facts) {
	if m != nil && m.gpu != nil && f != nil {
		m.gpu.set(recipe, f)
	}
}
