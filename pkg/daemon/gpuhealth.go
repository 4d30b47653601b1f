package daemon

import (
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglprov/sglprov/pkg/fitness"
	"github.com/sglprov/sglprov/pkg/gpu"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// gpuCollector exports the cheap GPU fitness counters of the facts each daemon check
// read (fitness.Counters: dcgm-exporter's names and labels, plus a recipe label), so that
// a fleet's GPU dashboards and alerts apply to a node without dcgm-exporter.
type gpuCollector struct {
	mu    sync.Mutex
	facts map[string]*gpu.Facts // by recipe
}

func newGPUCollector() *gpuCollector { return &gpuCollector{facts: map[string]*gpu.Facts{}} }

func (c *gpuCollector) set(recipe string, f *gpu.Facts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.facts[recipe] = f
}

// Describe sends nothing: the set of series follows the GPUs (an unchecked collector).
func (c *gpuCollector) Describe(chan<- *prometheus.Desc) {}

// Collect sends one series per GPU counter of every recipe's last facts.
func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	recipes := make([]string, 0, len(c.facts))
	for r := range c.facts {
		recipes = append(recipes, r)
	}
	sort.Strings(recipes)
	facts := make([]*gpu.Facts, len(recipes))
	for i, r := range recipes {
		facts[i] = c.facts[r]
	}
	c.mu.Unlock()
	for i, r := range recipes {
		for _, s := range fitness.Counters(facts[i]) {
			names := make([]string, 0, len(s.Labels)+1)
			for k := range s.Labels {
				names = append(names, k)
			}
			sort.Strings(names)
			values := make([]string, 0, len(names)+1)
			for _, k := range names {
				values = append(values, s.Labels[k])
			}
			names, values = append(names, "recipe"), append(values, r)
			typ, help := fitness.CounterMeta(s.Name)
			vt := prometheus.GaugeValue
			if typ == "counter" {
				vt = prometheus.CounterValue
			}
			m, err := prometheus.NewConstMetric(prometheus.NewDesc(s.Name, help, names, nil), vt, s.Value, validValues(values)...)
			if err == nil {
				ch <- m
			}
		}
	}
}

// eccOnly asks fitness.Check for its ecc check alone.
var eccOnly = recipe.GPURequirements{ECC: recipe.PolicyRefuse, PCIeLink: recipe.PolicyIgnore, MIG: recipe.PolicyWarn, Busy: recipe.PolicyIgnore,
	Clocks: recipe.PolicyIgnore, Xid: recipe.PolicyIgnore, P2P: recipe.PolicyIgnore}

// noProcs describes no process: the busy check is not asked, so /proc is not read.
type noProcs struct{}

func (noProcs) Describe(uint32) (string, string) { return "", "" }

// gpuFault is what the daemon knows of the GPUs going wrong under a serving node: a new
// uncorrectable ECC error, a pending remap or a failed one, or an Xid after which the GPU
// needs a reset, since the daemon started watching. It returns the reason ("" when the
// GPUs are fine) and keeps it while its cause lasts: an ECC fault until the volatile count
// and the remap state are clear again (a GPU reset), an Xid until the daemon restarts
// (after the reset or reboot its fix needs).
type gpuFault struct {
	last *gpu.Facts
	xid  []string
}

func (g *gpuFault) check(now *gpu.Facts) string {
	if now == nil {
		return strings.Join(g.xid, "; ")
	}
	if g.last != nil {
		for _, w := range fitness.Worse(g.last, now) {
			if strings.HasPrefix(w, "Xid ") {
				g.xid = append(g.xid, w)
			}
		}
	}
	g.last = now
	// The memory faults are the preflight's own ecc check (uncorrected errors since the
	// driver loaded, rows or pages pending, a failed remap): the only one asked here.
	var reasons []string
	for _, p := range fitness.Check(now, eccOnly, fitness.Options{Procs: noProcs{}}).Refusals {
		reasons = append(reasons, p.Message)
	}
	return strings.Join(append(reasons, g.xid...), "; ")
}
