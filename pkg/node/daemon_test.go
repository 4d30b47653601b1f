package node_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"charm.land/log/v2"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/node"
)

// TestDaemonRun: the daemon holds the node's lock, noted as its own, from start to end
// (an apply beside it is refused), applies each recipe it watches, writes the textfile with
// each recipe's node info after the first apply, and gives the lock back when it ends.
func TestDaemonRun(t *testing.T) {
	state, dir := t.TempDir(), t.TempDir()
	textfile := filepath.Join(dir, "sglprov.prom")
	d := &node.Daemon{StateDir: state, Textfile: textfile,
		Settings: node.WatchSettings{Interval: time.Hour, CanaryTimeout: time.Minute, Failures: 3, Restarts: 1, Log: log.New(io.Discard), Stderr: io.Discard}}
	for _, name := range []string{"d1", "d2"} {
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		path := writeRecipe(t, sub, "apiVersion: sglprov/v1\nname: "+name+"\nsteps:\n  - name: s\n    command: {argv: [\"true\"]}\n")
		n := realRecipe(t, path, state, new([]string))
		n.Kept = nil // the daemon keeps each apply's engine
		r, err := n.Load()
		if err != nil {
			t.Fatal(err)
		}
		d.Recipes, d.Loaded = append(d.Recipes, n), append(d.Loaded, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	// Each recipe's first apply ends with the textfile written: wait for both applies in it.
	var text string
	for deadline := time.Now().Add(time.Minute); ; {
		b, _ := os.ReadFile(textfile)
		text = string(b)
		if strings.Contains(text, `sglprov_apply_success{recipe="d1"} 1`) && strings.Contains(text, `sglprov_apply_success{recipe="d2"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no textfile with both applies after a minute: %q (Run: %v)", text, <-done)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if engine.LockNote(state) != engine.NoteDaemon {
		t.Errorf("lock note %q while the daemon runs, want %q", engine.LockNote(state), engine.NoteDaemon)
	}
	if _, err := engine.AcquireLock(state); !errors.Is(err, exitcode.ErrLocked) {
		t.Errorf("an apply beside the daemon: %v, want ErrLocked", err)
	}
	for _, name := range []string{"d1", "d2"} {
		if !strings.Contains(text, `sglprov_node_info{generation="",model="",profile="",recipe="`+name+`"`) {
			t.Errorf("textfile lacks the node info of %s:\n%s", name, text)
		}
		st, err := engine.LoadRecipeState(state, name)
		if err != nil || st.Steps["s"] == nil || st.Steps["s"].Result != engine.ResultOK {
			t.Errorf("recipe %s not applied: %+v, %v", name, st.Steps["s"], err)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run after its context ended: %v", err)
	}
	l, err := engine.AcquireLock(state)
	if err != nil {
		t.Fatalf("the lock after the daemon ended: %v", err)
	}
	l.Release()
}
