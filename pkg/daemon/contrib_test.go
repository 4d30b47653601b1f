package daemon

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func contribDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "contrib")
}

// promtool finds Prometheus's promtool; without it the test skips, except as root, where
// `make deps` installs it (Debian's prometheus package) and its absence is a failure.
func promtool(t *testing.T) string {
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("promtool is not installed: run make deps (Debian package prometheus)")
		}
		t.Skip("promtool is not installed (Debian package prometheus)")
	}
	return p
}

// The shipped alert rules load into Prometheus's own validator, and its unit tests of them
// pass.
func TestAlertRulesPromtool(t *testing.T) {
	bin := promtool(t)
	dir := filepath.Join(contribDir(t), "prometheus")
	for _, args := range [][]string{{"check", "rules", "sglprov.rules.yml"}, {"test", "rules", "sglprov.rules.test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// promqlWords are PromQL's functions, aggregations and keywords: every other word in an
// expression (outside strings, label matchers, groupings and ranges) is a metric name.
var promqlWords = []string{"sum", "max", "min", "avg", "count", "rate", "increase", "delta", "time",
	"by", "without", "on", "ignoring", "and", "or", "unless", "vector", "label_values", "group_left", "group_right",
	"topk", "bottomk", "abs", "clamp_min", "clamp_max", "irate", "changes", "resets", "offset", "bool"}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlGroups   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlWord     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// Grafana's label_values(METRIC, LABEL): the second argument is a label.
	labelValues = regexp.MustCompile(`label_values\(([^,()]*),\s*\w+\s*\)`)
)

// metricsIn returns the metric names an expression uses.
func metricsIn(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = labelValues.ReplaceAllString(e, "label_values($1)")
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlGroups.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	var out []string
	for _, w := range promqlWord.FindAllString(e, -1) {
		if !slices.Contains(promqlWords, w) {
			out = append(out, w)
		}
	}
	return out
}

func TestMetricsIn(t *testing.T) {
	got := metricsIn(`sum by (instance, recipe) (rate(sglprov_canary_failures_total{recipe=~"$recipe",x="a b"}[5m])) / on (instance) sglprov_daemon_up == 1`)
	if strings.Join(got, " ") != "sglprov_canary_failures_total sglprov_daemon_up" {
		t.Errorf("metricsIn: %q", got)
	}
}

// checkExprs fails for every metric an expression names that sglprov does not export.
func checkExprs(t *testing.T, where string, exprs []string) {
	t.Helper()
	exported := NewMetrics().Names()
	if len(exprs) == 0 {
		t.Fatalf("%s: no expressions found", where)
	}
	used := 0
	for _, e := range exprs {
		for _, m := range metricsIn(e) {
			used++
			if !slices.Contains(exported, m) {
				t.Errorf("%s: %q names %s, which sglprov does not export (it exports %s)", where, e, m, strings.Join(exported, ", "))
			}
		}
	}
	if used == 0 {
		t.Errorf("%s: the expressions name no metric at all", where)
	}
}

// Every alert rule names only metrics sglprov exports.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(contribDir(t), "prometheus", "sglprov.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("a rule without alert or expr: %+v", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	checkExprs(t, "sglprov.rules.yml", exprs)
}

// The dashboard is Grafana dashboard JSON (the structure Grafana imports: uid, title,
// schemaVersion, panels with ids, types, grid positions and targets), and every
// expression, the template variables' queries too, names only metrics sglprov exports.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(contribDir(t), "grafana", "sglprov-nodes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			GridPos *struct {
				X, Y, W, H int
			} `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("not a dashboard: uid %q title %q schemaVersion %d, %d panels", d.UID, d.Title, d.SchemaVersion, len(d.Panels))
	}
	ids := map[int]bool{}
	var exprs []string
	kinds := []string{"stat", "timeseries", "table", "state-timeline", "bargauge", "gauge"}
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if !slices.Contains(kinds, p.Type) || p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.W > 24 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: type %q, gridPos %+v", p.Title, p.Type, p.GridPos)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || tg.Expr == "" {
				t.Errorf("panel %q: a target without refId or expr", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil || q.Query == "" {
			t.Errorf("variable %s: query %s", v.Name, v.Query)
			continue
		}
		exprs = append(exprs, q.Query)
	}
	checkExprs(t, "sglprov-nodes.json", exprs)
}
