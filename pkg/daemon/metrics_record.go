package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/gpu"
)

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
	r, ok := gate.ResultOf(details)
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
	if r, ok := gate.ResultOf(details); ok && r.Ready {
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

// RecipeReloadFailed counts a SIGHUP whose recipe did not load (the daemon went on with
// what it ran).
func (m *Metrics) RecipeReloadFailed(recipe string) {
	if m != nil && m.daemon {
		m.reloadFails.WithLabelValues(recipe).Inc()
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

// setGPU records the facts a daemon check read for recipe, for the GPU counters.
func (m *Metrics) setGPU(recipe string, f *gpu.Facts) {
	if m != nil && m.gpu != nil && f != nil {
		m.gpu.set(recipe, f)
	}
}
