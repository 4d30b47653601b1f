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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/pkg/switchover/fakeunits"
)

// get asks a real endpoint of the metrics listener.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b)
}

// /healthz is what a load balancer checks: 200 only while the node answers correctly, 503
// with the reason otherwise; /readyz is 200 once the first gate passed, and stays so.
func TestHealthzAndReadyzForLoadBalancers(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	addr, stop, err := o.Metrics.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := "http://" + addr.String()
	if code, body := get(t, base+"/healthz"); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("/healthz before any apply: %d %q", code, body)
	}
	if code, _ := get(t, base+"/readyz"); code != 503 {
		t.Errorf("/readyz before any apply: %d", code)
	}
	d := New(o)
	ctx := context.Background()
	d.apply(ctx, "start")
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok node_health=healthy\n" {
		t.Errorf("/healthz healthy: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ok ready\n" {
		t.Errorf("/readyz after the first gate: %d %q", code, body)
	}
	n.canaryOK = false
	d.Check(ctx)
	code, body := get(t, base+"/healthz")
	if code != 503 || !strings.HasPrefix(body, "node_health=degraded: canary failed: case arithmetic: degenerate content") {
		t.Errorf("/healthz with garbage answers: %d %q", code, body)
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz once ready stays 200 (it is not the node's health): %d", code)
	}
	n.canaryOK = true
	d.Check(ctx)
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz after the canary passes again: %d", code)
	}
}

// With two recipes on one endpoint, /healthz is 200 only when both are healthy, and names
// the one that is not.
func TestHealthzTwoRecipes(t *testing.T) {
	m := NewMetrics()
	addr, stop, err := m.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	a, b := m.forRecipe("a"), m.forRecipe("b")
	a.setHealth(Healthy, "")
	b.setHealth(Unhealthy, "canary failed: HTTP 500")
	code, body := get(t, "http://"+addr.String()+"/healthz")
	if code != 503 || body != "a: node_health=healthy\nb: node_health=unhealthy: canary failed: HTTP 500\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	b.setHealth(Healthy, "")
	if code, _ := get(t, "http://"+addr.String()+"/healthz"); code != 200 {
		t.Errorf("/healthz with both healthy: %d", code)
	}
}

// hookLog records the hooks the daemon ran; fail makes the next runs fail.
type hookLog struct {
	mu   sync.Mutex
	runs []string
	fail bool
}

func (h *hookLog) hook(_ context.Context, name string, health Health, reason string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append(h.runs, fmt.Sprintf("%s %s", name, health))
	if h.fail {
		return errors.New("the router did not answer")
	}
	return nil
}

// The drain hook runs once when the node stops answering correctly, however many rounds
// it stays so; the undrain hook once when it answers again; a failed hook runs again at
// the next round.
func TestHooksRunOncePerTransition(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	hooks := &hookLog{}
	o.Hook = hooks.hook
	d := New(o)
	ctx := context.Background()
	round := func() { d.Check(ctx); d.syncHooks(ctx) }
	d.apply(ctx, "start")
	d.syncHooks(ctx)
	round()
	n.canaryOK = false
	for range 6 {
		round()
	}
	n.canaryOK = true
	round()
	round()
	want := []string{"on_healthy healthy", "on_unhealthy degraded", "on_healthy healthy"}
	if fmt.Sprint(hooks.runs) != fmt.Sprint(want) {
		t.Errorf("hooks ran %q, want %q", hooks.runs, want)
	}
	hooks.runs, hooks.fail = nil, true
	n.canaryOK = false
	round()
	round()
	hooks.fail = false
	round()
	round()
	want = []string{"on_unhealthy degraded", "on_unhealthy degraded", "on_unhealthy degraded"}
	if fmt.Sprint(hooks.runs) != fmt.Sprint(want) {
		t.Errorf("with a failing hook: ran %q, want %q (retried until it succeeds, then not again)", hooks.runs, want)
	}
	path := filepath.Join(t.TempDir(), "m.prom")
	if err := o.Metrics.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, w := range []string{`sglprov_hook_runs_total{hook="on_unhealthy",recipe="r",result="failed"} 2`, `sglprov_hook_runs_total{hook="on_healthy",recipe="r",result="ok"} 2`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("metrics lack %s:\n%s", w, b)
		}
	}
}

// A hook is a real process: it gets the environment it is given, its output is kept
// (bounded), and one that outlives its timeout is killed with its children.
func TestRunHook(t *testing.T) {
	out, err := RunHook(context.Background(), []string{"sh", "-c", `echo "drain $SGLPROV_RECIPE"; head -c 100000 /dev/zero | tr '\0' x`}, []string{"SGLPROV_RECIPE=qwen"}, 10*time.Second)
	if err != nil || !strings.HasPrefix(out, "drain qwen") && len(out) != hookOutputLimit {
		t.Errorf("RunHook: %v, %d bytes: %.40q", err, len(out), out)
	}
	if len(out) > hookOutputLimit {
		t.Errorf("kept %d bytes of output, more than %d", len(out), hookOutputLimit)
	}
	start := time.Now()
	_, err = RunHook(context.Background(), []string{"sh", "-c", "sleep 30 & sleep 30"}, nil, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still running after 300ms: killed") || time.Since(start) > 10*time.Second {
		t.Errorf("a hook past its timeout: %v after %s", err, time.Since(start))
	}
	if _, err := RunHook(context.Background(), []string{"sh", "-c", "exit 3"}, nil, time.Second); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("a failing hook: %v", err)
	}
}

// During a switch the daemon runs, /healthz and /readyz follow the served port: 503 with
// the reason while it refuses connections, 200 (the switch noted) while it answers; the
// metrics say a switch is in progress, and nothing of it is left once it ended.
func TestHealthzDuringASwitchFollowsTheServedPort(t *testing.T) {
	// A port nothing listens on, then a listener on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()

	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Metrics = NewMetrics()
	addr, stop, err := o.Metrics.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := "http://" + addr.String()
	type seen struct {
		code    int
		body    string
		ready   int
		metrics string
	}
	var during []seen
	look := func() {
		code, body := get(t, base+"/healthz")
		ready, _ := get(t, base+"/readyz")
		_, metrics := get(t, base+"/metrics")
		during = append(during, seen{code, body, ready, metrics})
	}
	reapply := make(chan string, 1)
	o.Reapply = reapply
	plain := o.Apply
	applies := 0
	done := make(chan struct{})
	o.Apply = func(ctx context.Context) (*engine.Report, error) {
		applies++
		if applies == 1 {
			return plain(ctx)
		}
		defer close(done)
		m := fakeunits.New(t.TempDir())
		unit := fmt.Appendf(nil, "[Service]\nExecStart=/usr/bin/fake-sglang --model-path /m --port %d\n", port)
		if _, err := m.Install(ctx, "sglang.service", unit); err != nil {
			return nil, err
		}
		if err := m.Commit(ctx, "sglang.service"); err != nil {
			return nil, err
		}
		cand := append(slices.Clone(unit), "# v2\n"...)
		sw := switchover.Switch{Manager: m, StateDir: t.TempDir(), Unit: "sglang.service", Stage: switchover.StageServed,
			Candidates: []switchover.Candidate{{Content: cand}},
			Gate: func(ctx context.Context, s switchover.Server) (switchover.Verdict, error) {
				look() // the served port refuses
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					return switchover.Verdict{}, err
				}
				look() // it answers
				_ = l.Close()
				return switchover.Verdict{Pass: true, Summary: "passed"}, nil
			}}
		if _, err := sw.Run(ctx); err != nil {
			return nil, err
		}
		return plain(ctx)
	}
	o.Interval = time.Hour
	d := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- d.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := get(t, base+"/healthz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon never turned healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	reapply <- "the recipe changed"
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the switch never ran")
	}
	code, body := get(t, base+"/healthz")
	_, metrics := get(t, base+"/metrics")
	cancel()
	<-ended
	if len(during) != 2 {
		t.Fatalf("looked %d times during the switch, want 2", len(during))
	}
	refused, answering := during[0], during[1]
	if refused.code != 503 || !strings.Contains(refused.body, "node_health=switching") || !strings.Contains(refused.body, fmt.Sprintf("127.0.0.1:%d refuses connections", port)) {
		t.Errorf("/healthz while the served port refuses: %d %q; want 503 naming the switch and the port", refused.code, refused.body)
	}
	if refused.ready != 503 {
		t.Errorf("/readyz while the served port refuses: %d, want 503", refused.ready)
	}
	if !strings.Contains(refused.metrics, `sglprov_switch_in_progress{recipe="r"} 1`) {
		t.Errorf("the metrics during the switch do not say it is in progress")
	}
	if answering.code != 200 || !strings.Contains(answering.body, "switch in progress") || answering.ready != 200 {
		t.Errorf("/healthz while the served port answers: %d %q (readyz %d); want 200 noting the switch", answering.code, answering.body, answering.ready)
	}
	if code != 200 || strings.Contains(body, "switch") || !strings.Contains(metrics, `sglprov_switch_in_progress{recipe="r"} 0`) {
		t.Errorf("after the switch: /healthz %d %q, switch_in_progress 0 in the metrics: %v", code, body, strings.Contains(metrics, `sglprov_switch_in_progress{recipe="r"} 0`))
	}
}
