package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/portowner"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// execRecipe serves the fake server under the exec manager, gated by the smoke step.
const execRecipe = `apiVersion: sglprov/v1
name: ex
steps:
  - name: service
    systemd:
      unit: sglang-ex.service
      manager: exec
      needs_commands: []
      command: [%s, -m, sglang.launch_server]
      env: {%s: "1"}
      model_path: /models/ex
      port: "%d"
  - name: smoke
    needs: [service]
    smoke:
      url: "http://127.0.0.1:%d"
      ready_timeout: 20s
      cases:
        - name: prime
          prompt: "Write a Python function to check if a number is prime. Be concise."
          expect: {regex: "def \\w+\\("}
`

// lockedBuffer is a log sink the daemon's goroutines and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDaemonReapplyKeepsExecServer: under the daemon, a SIGHUP whose recipe is unchanged
// applies it again without restarting the server the exec manager runs (the same
// process serves, started once), and the server stops when the daemon ends.
func TestDaemonReapplyKeepsExecServer(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, state := t.TempDir(), t.TempDir()
	path := writeRecipe(t, dir, fmt.Sprintf(execRecipe, bin, fakeServerEnv, port, port))
	n := realRecipe(t, path, state, new([]string))
	n.Kept = nil // the daemon keeps each apply's engine
	managers := &node.Managers{}
	defer managers.Close()
	n.Deps.NewManager = managers.Manager
	r, err := n.Load()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	d := &node.Daemon{StateDir: state, Recipes: []*node.Recipe{n}, Loaded: []*recipe.Recipe{r},
		Settings: node.WatchSettings{Interval: time.Hour, CanaryTimeout: time.Minute, Failures: 3, Restarts: 1, Log: log.New(logs), Stderr: logs}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	waitApplies := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); strings.Count(logs.String(), "apply done") < want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d applies not done after a minute:\n%s", want, logs.String())
			}
		}
	}
	waitApplies(1)
	serverLog := filepath.Join(state, "logs", "sglang-ex.service.log")
	pidOf := func() string {
		t.Helper()
		ls, err := portowner.Lookup(port)
		if err != nil {
			t.Fatal(err)
		}
		var pids []string
		for _, l := range ls {
			pids = append(pids, fmt.Sprint(l.PID))
		}
		return strings.Join(pids, ",")
	}
	before := pidOf()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitApplies(2)
	if !strings.Contains(logs.String(), "SIGHUP: the recipe was re-read") {
		t.Fatalf("the daemon did not re-read the recipe on SIGHUP:\n%s", logs.String())
	}
	b, _ := os.ReadFile(serverLog)
	if got := strings.Count(string(b), "sglprov: sglang-ex.service: starting:"); got != 1 {
		t.Errorf("the server was started %d times across an apply of an unchanged recipe, want once:\n%s", got, b)
	}
	if after := pidOf(); after != before || before == "" {
		t.Errorf("the process on the port changed across the re-apply: %q, then %q", before, after)
	}
	cancel()
	stopped = true
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run after its context ended: %v", err)
	}
	// The daemon ends: the server is its child and goes with it.
	if err := managers.Close(); err != nil {
		t.Errorf("closing the managers: %v", err)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("the server still listens after the daemon ended")
	}
}
