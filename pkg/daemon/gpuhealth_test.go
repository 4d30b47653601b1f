package daemon

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/sglprov/sglprov/pkg/gpu"
)

func loadFixture(t *testing.T, name string) *gpu.Facts {
	t.Helper()
	f, err := gpu.LoadFixture(filepath.Join("..", "..", "testdata", "gpu", name))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A new uncorrectable ECC error or a reset-class Xid under a serving node marks it
// unhealthy at once (the canary and the ladder are not run: no rung mends a GPU); the ECC
// fault clears with its cause, the Xid stays until the daemon restarts. The GPU counters are
// exported under dcgm-exporter's names.
func TestGPUFaultMarksTheNodeUnhealthy(t *testing.T) {
	facts := loadFixture(t, "rtx-pro-6000-x8-fit.json")
	n := &node{driver: facts.DriverVersion, canaryOK: true}
	o := n.options()
	cur := facts
	o.Detect = func(context.Context) (*gpu.Facts, error) { return cur, nil }
	o.Metrics = NewMetrics()
	o.Recipe = "qwen"
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	d.Check(ctx)
	if d.Health() != Healthy {
		t.Fatalf("health = %s, want healthy", d.Health())
	}

	bad := loadFixture(t, "rtx-pro-6000-x8-fit.json")
	bad.GPUs[2].Health.ECC.VolatileUncorrected = 2
	cur = bad
	d.Check(ctx)
	if d.Health() != Unhealthy || !strings.Contains(d.reason, "GPU fault: GPU 2") {
		t.Fatalf("after an ECC error: %s %q", d.Health(), d.reason)
	}
	if n.restarts != 0 {
		t.Errorf("a GPU fault restarted the service %d times", n.restarts)
	}
	var buf bytes.Buffer
	fams, err := o.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		_, _ = expfmt.MetricFamilyToText(&buf, f)
	}
	if !strings.Contains(buf.String(), `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{UUID="`+bad.GPUs[2].UUID+`",gpu="2"`) ||
		!strings.Contains(buf.String(), `recipe="qwen"} 2`) {
		t.Errorf("metrics lack the ECC counter:\n%s", buf.String())
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		if out, err := cmd.CombinedOutput(); err != nil && strings.Contains(string(out), "parsing error") {
			t.Errorf("promtool: %v\n%s", err, out)
		}
	}

	cur = facts // the GPU was reset: the volatile count is 0 again
	d.Check(ctx)
	if d.Health() != Healthy {
		t.Fatalf("after the reset: %s %q, want healthy (the canary passes)", d.Health(), d.reason)
	}

	xid := loadFixture(t, "rtx-pro-6000-x8-fit.json")
	xid.Kernel.Xid = []gpu.XidEvent{{PCI: "0000:18:00", Code: 79, Text: "Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."}}
	cur = xid
	d.Check(ctx)
	if d.Health() != Unhealthy || !strings.Contains(d.reason, "Xid 79") {
		t.Fatalf("after an Xid 79: %s %q", d.Health(), d.reason)
	}
	d.Check(ctx)
	if d.Health() != Unhealthy {
		t.Errorf("the Xid fault went away by itself: %s", d.Health())
	}
}
