package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// parseTextfile writes m's textfile and parses it back as Prometheus would, failing the
// test on a file that is not valid UTF-8 or not the text format.
func parseTextfile(t *testing.T, m *Metrics) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.prom")
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(b) {
		t.Errorf("the textfile is not valid UTF-8:\n%q", b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := parser.TextToMetricFamilies(bytes.NewReader(b)); err != nil {
		t.Errorf("parsing the textfile: %v", err)
	}
	return string(b)
}

// Label values that are not UTF-8 (a served name given on the command line, a step or
// recipe name, a GPU name a driver reports) never panic the metrics of a one-shot apply:
// each invalid byte becomes U+FFFD and the textfile is written, valid.
func TestApplyMetricsLabelsNotUTF8(t *testing.T) {
	m := NewApplyMetrics()
	m.SetNodeInfo(NodeInfo{Recipe: "qwen\xff", Model: "/models/q\xfe", ServedName: "qwen\xff3.5", Unit: "sglang.service"})
	rep := &engine.Report{Started: time.Now(), Steps: []*engine.StepReport{
		{Name: "weights\xff", Kind: "download", Result: engine.ResultOK},
		{Name: "smoke", Kind: "smoke", Gate: true, Result: engine.ResultFailed},
	}}
	m.ObserveApply("qwen\xff", rep, errors.New("step smoke failed"))
	m.SetNodeInfo(NodeInfo{Recipe: "qwen\xff", ServedName: "qwen\xff3.6"}) // replaces the first
	tf := parseTextfile(t, m)
	for _, want := range []string{
		`sglprov_node_info{generation="",model="",profile="",recipe="qwen` + "\uFFFD" + `",served_name="qwen` + "\uFFFD" + `3.6",sglang_commit="",unit=""} 1`,
		`sglprov_step_ok{recipe="qwen` + "\uFFFD" + `",step="weights` + "\uFFFD" + `"} 1`,
		`sglprov_apply_success{recipe="qwen` + "\uFFFD" + `"} 0`,
	} {
		if !strings.Contains(tf, want) {
			t.Errorf("the textfile lacks %s:\n%s", want, tf)
		}
	}
	if strings.Count(tf, "sglprov_node_info{") != 1 {
		t.Errorf("node_info of the first call was not replaced:\n%s", tf)
	}
	// A refused run deletes the steps' series of that recipe, found by the same label.
	m.ObserveApply("qwen\xff", &engine.Report{Started: time.Now(), Result: engine.ResultRefused}, errors.New("refused"))
	if tf := parseTextfile(t, m); strings.Contains(tf, "sglprov_step_ok{") {
		t.Errorf("the steps' series outlived a refused run:\n%s", tf)
	}
}

// The daemon of a recipe whose name and GPUs' names are not UTF-8 runs its checks, hooks
// and ladder and writes its textfile and /metrics without a panic.
func TestDaemonMetricsLabelsNotUTF8(t *testing.T) {
	facts := loadFixture(t, "rtx-pro-6000-x8-fit.json")
	for i := range facts.GPUs {
		facts.GPUs[i].Name = "NVIDIA RTX PRO 6000\xff"
	}
	n := &node{driver: facts.DriverVersion, canaryOK: true}
	o := n.options()
	o.Detect = func(context.Context) (*gpu.Facts, error) { return facts, nil }
	o.Metrics = NewMetrics()
	o.Recipe = "qwen\xff"
	o.FailuresBeforeRestart = 1
	o.Hook = (&hookLog{}).hook
	addr, stop, err := o.Metrics.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	d.syncHooks(ctx)
	o.Metrics.SetNodeInfo(NodeInfo{Recipe: o.Recipe, ServedName: "qwen\xff3.5"})
	n.mu.Lock()
	n.canaryOK = false
	n.mu.Unlock()
	d.Check(ctx)
	d.syncHooks(ctx)
	tf := parseTextfile(t, o.Metrics)
	for _, want := range []string{
		`sglprov_node_info{generation="",model="",profile="",recipe="qwen` + "\uFFFD" + `",served_name="qwen` + "\uFFFD" + `3.5",sglang_commit="",unit=""} 1`,
		`sglprov_hook_runs_total{hook="on_unhealthy",recipe="qwen` + "\uFFFD" + `",result="ok"} 1`,
		`modelName="NVIDIA RTX PRO 6000` + "\uFFFD" + `"`,
	} {
		if !strings.Contains(tf, want) {
			t.Errorf("the textfile lacks %s:\n%s", want, tf)
		}
	}
	if fams := scrape(t, "http://"+addr.String()+"/metrics"); len(fams) == 0 {
		t.Error("/metrics is empty")
	}
}
