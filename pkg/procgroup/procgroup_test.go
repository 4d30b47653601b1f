package procgroup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether the process pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// gone waits up to 5 s for pid to end.
func gone(pid int) bool {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !alive(pid) {
			return true
		}
	}
	return false
}

// readPID waits for the file p to hold a process ID and returns it.
func readPID(t *testing.T, p string) int {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(p)
		if err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("reading %s: %v", p, err)
			}
			return pid
		}
	}
	t.Fatalf("%s never got a process ID", p)
	return 0
}

// killAtEnd kills pid when the test ends, should the code under test have left it.
func killAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
}

// A grandchild that ignores SIGTERM is killed with its group once the grace is over,
// though the child itself left at SIGTERM; Stop does not wait the grace for the child.
func TestStopKillsAGrandchildThatIgnoresTerm(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "grandchild")
	cmd := exec.Command("sh", "-c", `sh -c 'trap "" TERM; echo $$ > "$1"; while :; do sleep 0.05; done' sh "$1" & wait`, "sh", pidfile)
	c, err := Start(cmd, Options{Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gc := readPID(t, pidfile)
	killAtEnd(t, gc)
	if got, err := syscall.Getpgid(gc); err != nil || got != c.Pid() {
		t.Fatalf("the grandchild's group is %d (%v), want the child's %d", got, err, c.Pid())
	}
	if got, _ := syscall.Getpgid(0); got == c.Pid() {
		t.Fatalf("the child is in the test's own group %d", got)
	}
	began := time.Now()
	err = c.Stop()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("Stop = %v, want the child's exit by signal", err)
	}
	if c.Killed() {
		t.Errorf("Killed() = true; the child itself left at SIGTERM")
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Stop took %s", took)
	}
	if !gone(gc) {
		t.Errorf("the grandchild %d that ignores SIGTERM still runs after Stop", gc)
	}
}

// A child that ignores SIGTERM is killed after the grace, and Killed says so.
func TestStopKillsAChildThatIgnoresTermAfterTheGrace(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo $$ > "$1"; while :; do sleep 0.05; done`, "sh", ready)
	grace := 400 * time.Millisecond
	c, err := Start(cmd, Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	readPID(t, ready)
	began := time.Now()
	err = c.Stop()
	took := time.Since(began)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("Stop = %v, want killed by SIGKILL", err)
	}
	if !c.Killed() {
		t.Errorf("Killed() = false after SIGKILL")
	}
	if took < grace {
		t.Errorf("Stop killed after %s, before the grace of %s", took, grace)
	}
	if err2 := c.Stop(); err2 != err {
		t.Errorf("a second Stop = %v, want %v", err2, err)
	}
}

// With no grace, Stop kills at once.
func TestStopWithoutGraceKillsAtOnce(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command("sh", "-c", `echo $$ > "$1"; while :; do sleep 0.05; done`, "sh", ready)
	c, err := Start(cmd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	readPID(t, ready)
	_ = c.Stop()
	if !c.Killed() {
		t.Errorf("Killed() = false")
	}
}

// What a child leaves in its group is killed when the child exits, unless KeepLeftovers;
// either way Wait does not wait for the leftover that holds the output pipe.
func TestLeftoversWhenTheChildExits(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run("keep="+strconv.FormatBool(keep), func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "leftover")
			cmd := exec.Command("sh", "-c", `sleep 1000 & echo $! > "$1"; echo started`, "sh", pidfile)
			out := &Tail{Max: 1 << 10}
			cmd.Stdout = out
			c, err := Start(cmd, Options{KeepLeftovers: keep, OutputGrace: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			if err := c.Wait(); err != nil {
				t.Fatalf("Wait = %v", err)
			}
			if took := time.Since(began); took > 3*time.Second {
				t.Errorf("Wait took %s: it waited for the leftover holding the pipe", took)
			}
			left := readPID(t, pidfile)
			killAtEnd(t, left)
			if got := strings.TrimSpace(out.String()); got != "started" {
				t.Errorf("output %q, want started", got)
			}
			if keep {
				if !alive(left) {
					t.Errorf("the leftover %d was killed with KeepLeftovers", left)
				}
				// Stop reaches the group even after its leader has gone.
				_ = c.Stop()
				if !gone(left) {
					t.Errorf("the leftover %d outlived Stop", left)
				}
			} else if !gone(left) {
				t.Errorf("the leftover %d outlived the child", left)
			}
		})
	}
}

// Run stops the group when its context ends, and starts nothing with a context that has
// ended already.
func TestRunStopsTheGroupWhenTheContextEnds(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "grandchild")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	cmd := exec.Command("sh", "-c", `sh -c 'echo $$ > "$1"; exec sleep 1000' sh "$1" & wait`, "sh", pidfile)
	began := time.Now()
	err := Run(ctx, cmd, Options{Grace: 5 * time.Second})
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("Run = %v, want the exit by signal", err)
	}
	if took := time.Since(began); took > 4*time.Second {
		t.Errorf("Run took %s: the group should have left at SIGTERM", took)
	}
	gc := readPID(t, pidfile)
	killAtEnd(t, gc)
	if !gone(gc) {
		t.Errorf("the grandchild %d outlived Run", gc)
	}

	marker := filepath.Join(t.TempDir(), "ran")
	err = Run(ctx, exec.Command("sh", "-c", `touch "$1"`, "sh", marker), Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run with an ended context = %v, want %v", err, context.DeadlineExceeded)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("Run with an ended context started the command")
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// The output is read to its end, into separate or shared writers; a writer that fails
// does not leave the child blocked on a full pipe; Tail and Head keep their bound.
func TestOutput(t *testing.T) {
	script := `i=0; while [ $i -lt 2000 ]; do echo "line $i of stdout"; i=$((i+1)); done; echo oops >&2`
	var stdout bytes.Buffer
	var stderr bytes.Buffer
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := Run(context.Background(), cmd, Options{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout.String(), "\n"); n != 2000 || !strings.HasSuffix(stdout.String(), "line 1999 of stdout\n") {
		t.Errorf("stdout has %d lines, ends %q", n, stdout.String()[max(0, stdout.Len()-30):])
	}
	if stderr.String() != "oops\n" {
		t.Errorf("stderr %q", stderr.String())
	}

	tail, head := &Tail{Max: 64}, &Head{Max: 16}
	cmd = exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = tail, tail
	if err := Run(context.Background(), cmd, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := tail.String(); len(got) != 64 || !strings.HasSuffix(got, "line 1999 of stdout\noops\n") {
		t.Errorf("tail %q, want the last 64 bytes", got)
	}
	cmd = exec.Command("sh", "-c", script)
	cmd.Stdout = head
	if err := Run(context.Background(), cmd, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := head.String(); got != "line 0 of stdout" {
		t.Errorf("head %q, want the first 16 bytes", got)
	}

	// 4 MiB, far more than a pipe holds, into a writer that fails.
	cmd = exec.Command("sh", "-c", `head -c 4194304 /dev/zero`)
	cmd.Stdout = failingWriter{}
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), cmd, Options{}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run into a failing writer = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the child blocked on its output after the writer failed")
	}
}

// Start keeps the caller's other process attributes and sets the parent-death signal.
func TestStartKeepsTheProcessAttributes(t *testing.T) {
	cmd := exec.Command("true")
	cred := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), NoSetGroups: true}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	c, err := Start(cmd, Options{ParentDeath: syscall.SIGTERM})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	a := cmd.SysProcAttr
	if !a.Setpgid || a.Pdeathsig != syscall.SIGTERM || a.Credential != cred {
		t.Errorf("SysProcAttr = %+v, want Setpgid, Pdeathsig SIGTERM and the credential kept", a)
	}
	if _, err := Start(exec.Command(filepath.Join(t.TempDir(), "missing")), Options{}); err == nil {
		t.Errorf("Start of a missing executable succeeded")
	}
}
