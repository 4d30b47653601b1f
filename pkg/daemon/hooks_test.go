package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncHooks is what a check does with the hooks (startHooks), then waits for the hook it
// started to end: the tests' rounds are then in a fixed order.
func (d *Loop) syncHooks(ctx context.Context) {
	d.startHooks(ctx, true)
	d.waitHooks()
}

// gone reports whether process pid has ended (no longer there, or a zombie no one reaped
// yet), waiting up to 5 s for it.
func gone(t *testing.T, pid int) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			return true
		}
	}
	return false
}

// readPID waits up to 5 s for a hook to write a pid into path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && strings.HasSuffix(string(b), "\n") {
			return pid
		}
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// A hook whose process exits is judged by its exit status at once, though a child it
// started still runs and holds its output open; that child is killed with the hook's
// process group, so nothing it left behind outlives the run.
func TestRunHookJudgedByItsExitWhenAChildLingers(t *testing.T) {
	for _, tt := range []struct {
		name, exit, want string
	}{
		{"exit 0", "exit 0", ""},
		{"exit 3", "exit 3", "exit status 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "child")
			start := time.Now()
			out, err := RunHook(context.Background(), []string{"sh", "-c",
				`sleep 300 & echo $! > "$PIDFILE"; echo registered; ` + tt.exit}, []string{"PIDFILE=" + pidfile}, 30*time.Second)
			took := time.Since(start)
			switch {
			case tt.want == "" && err != nil, tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("RunHook: %v, want %q", err, tt.want)
			case out != "registered":
				t.Errorf("output %q, want the hook's own", out)
			case took > 2*time.Second:
				t.Errorf("RunHook returned after %s: it waited for the child, not for the hook", took)
			}
			if pid := readPID(t, pidfile); !gone(t, pid) {
				_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
				t.Errorf("the child the hook left (pid %d) still runs", pid)
			}
		})
	}
}

// A hook past its timeout is killed with its whole process group, the children it
// started too; a process that left the group (setsid) and holds the output pipe does not
// hold up the hook's end by more than a second.
func TestRunHookTimeoutKillsTheGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "child")
	start := time.Now()
	_, err := RunHook(context.Background(), []string{"sh", "-c", `trap "" TERM; sleep 300 & echo $! > "$PIDFILE"; wait`},
		[]string{"PIDFILE=" + pidfile}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still running after 300ms: killed") || time.Since(start) > hookKillGrace+3*time.Second {
		t.Errorf("a hook past its timeout: %v after %s", err, time.Since(start))
	}
	if pid := readPID(t, pidfile); !gone(t, pid) {
		_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
		t.Errorf("the hook's child (pid %d) outlived its timeout", pid)
	}

	start = time.Now()
	out, err := RunHook(context.Background(), []string{"sh", "-c", `setsid sleep 300 & echo $! > "$PIDFILE"; echo done`},
		[]string{"PIDFILE=" + pidfile}, 30*time.Second)
	took := time.Since(start)
	_ = exec.Command("kill", "-9", strconv.Itoa(readPID(t, pidfile))).Run()
	if err != nil || out != "done" || took > hookOutputGrace+2*time.Second {
		t.Errorf("a hook whose escaped child holds the pipe: %v, %q after %s", err, out, took)
	}
}

// A hook runs beside the checks: while the undrain hook hangs (until its 30 s timeout),
// the server breaks, and the next check says so at once: the node is degraded and
// /healthz answers 503, within a few intervals, not after the hook's timeout. The hung
// hook is stopped (its process group killed) since the node's health turned, and the
// drain hook runs.
func TestHangingHookDoesNotHoldTheChecks(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Interval = 20 * time.Millisecond
	o.FailuresBeforeRestart = 1000
	o.Metrics = NewMetrics()
	addr, stopServe, err := o.Metrics.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopServe()
	pidfile := filepath.Join(t.TempDir(), "undrain")
	var mu sync.Mutex
	var ran []string
	o.Hook = func(ctx context.Context, hook string, h Health, reason string) error {
		mu.Lock()
		ran = append(ran, hook)
		mu.Unlock()
		if hook == HookHealthy {
			_, err := RunHook(ctx, []string{"sh", "-c", `sleep 300 & echo $! > "$PIDFILE"; wait`}, []string{"PIDFILE=" + pidfile}, 30*time.Second)
			return err
		}
		return nil
	}
	d := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	child := readPID(t, pidfile) // the undrain hook hangs now
	n.mu.Lock()
	n.canaryOK = false
	n.mu.Unlock()
	broke := time.Now()
	for d.Health() == Healthy {
		if time.Since(broke) > 3*time.Second {
			t.Fatalf("still healthy %s after the server broke: the hung hook holds the checks", time.Since(broke))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, body := get(t, "http://"+addr.String()+"/healthz"); code != 503 || !strings.Contains(body, "canary failed") {
		t.Errorf("/healthz after the server broke: %d %q", code, body)
	}
	if !gone(t, child) {
		_ = exec.Command("kill", "-9", strconv.Itoa(child)).Run()
		t.Errorf("the undrain hook's child (pid %d) still runs after the health turned", child)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := fmt.Sprint(ran)
		mu.Unlock()
		if got == "[on_healthy on_unhealthy]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hooks ran %s, want [on_healthy on_unhealthy]", got)
		}
	}
}

// A hook that leaves a child behind and exits 0 succeeded: it runs once, not at every
// check, and the child it left is killed.
func TestHookLeavingAChildRunsOnce(t *testing.T) {
	n := &node{driver: "580.95.05", canaryOK: true}
	o := n.options()
	o.Interval = 20 * time.Millisecond
	o.Metrics = NewMetrics()
	dir := t.TempDir()
	var mu sync.Mutex
	runs := 0
	o.Hook = func(ctx context.Context, hook string, h Health, reason string) error {
		mu.Lock()
		runs++
		pidfile := filepath.Join(dir, strconv.Itoa(runs))
		mu.Unlock()
		_, err := RunHook(ctx, []string{"sh", "-c", `sleep 300 & echo $! > "$PIDFILE"; exit 0`}, []string{"PIDFILE=" + pidfile}, 30*time.Second)
		return err
	}
	d := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	time.Sleep(time.Second) // 50 checks
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if runs != 1 {
		t.Errorf("the hook ran %d times, want once", runs)
	}
	for i := 1; i <= runs; i++ {
		if pid := readPID(t, filepath.Join(dir, strconv.Itoa(i))); !gone(t, pid) {
			_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
			t.Errorf("run %d left pid %d running", i, pid)
		}
	}
	if tf := textfile(t, o.Metrics); !strings.Contains(tf, `sglprov_hook_runs_total{hook="on_healthy",recipe="r",result="ok"} 1`) {
		t.Errorf("metrics:\n%s", tf)
	}
}
