package daemon

import (
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglprov/sglprov/pkg/buildinfo"
	"github.com/sglprov/sglprov/pkg/fitness"
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
	reloadFails    counterVec
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
	m.reloadFails = cv("recipe_reload_failures_total", "SIGHUPs whose recipe did not load: the daemon went on with what it ran.")
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

// beat sets the heartbeat to now.
func (m *Metrics) beat() {
	if m != nil {
		m.heartbeat.Set(float64(m.now().UnixMilli()) / 1000)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
