package command

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
)

func TestCommandCreatesAndIntact(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	step, err := Kind().New("mk", &Spec{Argv: []string{"sh", "-c", "echo $GREETING > " + out}, Env: map[string]string{"GREETING": "hello"}, Creates: []string{out}})
	if err != nil {
		t.Fatal(err)
	}
	env := engine.NewTestEnv(dir, nil)
	ctx := context.Background()
	if ok, why, _ := step.Intact(ctx, env); ok || !strings.HasPrefix(why, "outputs missing: ") {
		t.Errorf("before run: intact=%v %q", ok, why)
	}
	if err := step.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "hello\n" {
		t.Errorf("output %q: env not passed", b)
	}
	if ok, why, err := step.Intact(ctx, env); !ok || err != nil {
		t.Errorf("after run: intact=%v %q %v", ok, why, err)
	}
	os.WriteFile(out, []byte("edited\n"), 0o644)
	if ok, why, _ := step.Intact(ctx, env); ok || why != "outputs changed: "+out {
		t.Errorf("after edit: intact=%v %q", ok, why)
	}
}

func TestCommandFailureShowsLastLines(t *testing.T) {
	var log bytes.Buffer
	step, _ := Kind().New("bad", &Spec{Argv: []string{"sh", "-c", "for i in $(seq 1 50); do echo line $i; done; exit 7"}})
	env := engine.NewTestEnv(t.TempDir(), &log)
	err := step.Run(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "exit status 7") || !strings.Contains(err.Error(), "line 50") || strings.Contains(err.Error(), "line 10\n") {
		t.Errorf("error %v", err)
	}
	if !strings.Contains(log.String(), "line 1\n") {
		t.Errorf("the step log lacks the full output")
	}
}

func TestCommandSpecErrors(t *testing.T) {
	if _, err := Kind().New("x", &Spec{}); err == nil {
		t.Error("empty argv accepted")
	}
}

// A path of creates that is a FIFO (a command may make one) is recorded by its type, never
// opened: reading it waited for a writer, and the run could not be stopped.
func TestCommandCreatesFIFO(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "made.fifo")
	step, err := Kind().New("mk", &Spec{Argv: []string{"mkfifo", out}, Creates: []string{out}})
	if err != nil {
		t.Fatal(err)
	}
	env := engine.NewTestEnv(dir, nil)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		if err := step.Run(ctx, env); err != nil {
			done <- err
			return
		}
		ok, why, err := step.Intact(ctx, env)
		if err == nil && !ok {
			err = errors.New("not intact after the run: " + why)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step waited on the FIFO it created")
	}
	os.Remove(out)
	os.WriteFile(out, []byte("a file now\n"), 0o644)
	if ok, why, _ := step.Intact(ctx, env); ok || why != "outputs changed: "+out {
		t.Errorf("FIFO replaced by a file: intact=%v %q", ok, why)
	}
}

// TestCommandStatusSaysRunning: on a terminal a command's live line says it is running; it
// said "building", as a build step's does, for any command.
func TestCommandStatusSaysRunning(t *testing.T) {
	var console bytes.Buffer
	step, _ := Kind().New("chatter", &Spec{Argv: []string{"sh", "-c", "echo line 1; sleep 1.3"}})
	env := engine.NewTestEnv(t.TempDir(), nil)
	env.Console, env.IsTerminal, env.StepName = &console, true, "chatter"
	if err := step.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(console.String(), "\r\x1b[Kchatter: running 1s, 1 lines") {
		t.Errorf("no \"chatter: running 1s, 1 lines\" status line: %q", console.String())
	}
}
