package service

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// A staged unit is written to the runtime folder and leaves the persistent one as it was
// until Commit; Discard brings the persistent one back; staging the persistent content
// drops what was staged.
func TestSystemdStageCommitDiscard(t *testing.T) {
	root := t.TempDir()
	etc, run := filepath.Join(root, "etc"), filepath.Join(root, "run")
	conn := &fakeConn{props: map[string]any{}}
	s := NewSystemdConn(conn, etc, nil, nil)
	s.RuntimeDir = run
	ctx := context.Background()
	good, next := []byte("[Service]\nExecStart=/gen/a/python\n"), []byte("[Service]\nExecStart=/gen/b/python\n")

	if changed, err := s.Stage(ctx, "u.service", good); err != nil || !changed {
		t.Fatalf("first Stage = %v, %v", changed, err)
	}
	if s.Persistent("u.service") || !s.Staged("u.service") {
		t.Fatalf("after the first stage: persistent %v, staged %v; want staged only", s.Persistent("u.service"), s.Staged("u.service"))
	}
	if err := s.Commit(ctx, "u.service"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(etc, "u.service")); string(b) != string(good) || s.Staged("u.service") {
		t.Fatalf("after Commit: persistent %q, staged %v", b, s.Staged("u.service"))
	}
	if !strings.Contains(strings.Join(conn.calls, ";"), "enable u.service") {
		t.Errorf("Commit did not enable the unit: %v", conn.calls)
	}

	// The next generation is staged: the persistent unit (what a reboot starts) stays.
	if changed, err := s.Stage(ctx, "u.service", next); err != nil || !changed {
		t.Fatalf("Stage(next) = %v, %v", changed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(etc, "u.service")); string(b) != string(good) {
		t.Fatalf("staging rewrote the persistent unit: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(run, "u.service")); string(b) != string(next) {
		t.Fatalf("staged unit = %q", b)
	}
	if had, err := s.Discard(ctx, "u.service"); err != nil || !had {
		t.Fatalf("Discard = %v, %v", had, err)
	}
	if s.Staged("u.service") {
		t.Fatal("Discard left the staged unit")
	}

	// Staging what is persistent drops a staged unit and says the unit changed.
	if _, err := s.Stage(ctx, "u.service", next); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.Stage(ctx, "u.service", good); err != nil || !changed || s.Staged("u.service") {
		t.Fatalf("Stage(persistent) = %v, %v, staged %v; want the staged unit dropped", changed, err, s.Staged("u.service"))
	}
	if changed, err := s.Stage(ctx, "u.service", good); err != nil || changed {
		t.Fatalf("Stage(persistent) again = %v, %v; want no change", changed, err)
	}
}

// Remove stops and disables a unit and deletes its persistent and staged files; a unit
// systemd does not know (only staged, or gone) is only deleted.
func TestSystemdRemove(t *testing.T) {
	root := t.TempDir()
	etc, run := filepath.Join(root, "etc"), filepath.Join(root, "run")
	conn := &fakeConn{props: map[string]any{"LoadState": "loaded"}}
	s := NewSystemdConn(conn, etc, nil, nil)
	s.RuntimeDir = run
	ctx := context.Background()
	for _, d := range []string{etc, run} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "u.service"), []byte("[Service]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remove(ctx, "u.service"); err != nil {
		t.Fatal(err)
	}
	if s.Persistent("u.service") || s.Staged("u.service") {
		t.Errorf("Remove left a unit file")
	}
	if got := strings.Join(conn.calls, ";"); !strings.Contains(got, "stop u.service") || !strings.Contains(got, "disable u.service") || !strings.Contains(got, "reload") {
		t.Errorf("Remove asked systemd %q", got)
	}
	conn.calls, conn.props = nil, map[string]any{"LoadState": "not-found"}
	if err := s.Remove(ctx, "u.service"); err != nil {
		t.Fatalf("Remove of a unit systemd does not know: %v", err)
	}
	if got := strings.Join(conn.calls, ";"); strings.Contains(got, "stop") || strings.Contains(got, "disable") {
		t.Errorf("Remove of a gone unit asked systemd %q", got)
	}
}

// transientConn is a fakeConn that starts transient units, recording their ExecStart.
type transientConn struct {
	*fakeConn
	argv [][]string
}

func (c *transientConn) StartTransientUnitContext(_ context.Context, name, _ string, props []sddbus.Property, ch chan<- string) (int, error) {
	c.record("transient " + name)
	for _, p := range props {
		if p.Name == "ExecStart" {
			// go-systemd's command type is unexported: its Args field is read by name.
			if v := reflect.ValueOf(p.Value.Value()); v.Kind() == reflect.Slice && v.Len() > 0 {
				if args, ok := v.Index(0).FieldByName("Args").Interface().([]string); ok {
					c.argv = append(c.argv, args)
				}
			}
		}
	}
	go func() { ch <- "done" }()
	return 1, nil
}

// Staging starts, once, the watcher that drops the staged unit should this process end
// without keeping it, with this process's PID and start time; Commit and Discard stop it.
func TestSystemdStageStartsTheWatcherOnce(t *testing.T) {
	root := t.TempDir()
	conn := &transientConn{fakeConn: &fakeConn{props: map[string]any{}}}
	s := NewSystemdConn(conn, filepath.Join(root, "etc"), nil, nil)
	s.RuntimeDir = filepath.Join(root, "run")
	ctx := context.Background()
	for _, content := range []string{"[Service]\nExecStart=/a --port 1\n", "[Service]\nExecStart=/a\n"} {
		if _, err := s.Stage(ctx, "w.service", []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	calls := strings.Join(conn.calls, ";")
	if strings.Count(calls, "transient "+WatcherUnit("w.service")) != 1 || len(conn.argv) != 1 {
		t.Fatalf("two stages started the watcher %d times (calls %v), want once", strings.Count(calls, "transient"), conn.calls)
	}
	argv := conn.argv[0]
	start, _ := selfStartTime()
	want := []string{strconv.Itoa(os.Getpid()), start, "w.service", filepath.Join(root, "run", "w.service"), filepath.Join(root, "etc", "w.service")}
	if len(argv) != 9 || argv[0] != "/bin/sh" || strings.Join(argv[4:], " ") != strings.Join(want, " ") {
		t.Errorf("the watcher runs %q, want sh -c SCRIPT with %q", argv, want)
	}
	if !strings.Contains(argv[2], "$$pid") || strings.Contains(strings.ReplaceAll(argv[2], "$$", ""), "$") {
		t.Errorf("the watcher's script is not escaped for systemd's $ substitution:\n%s", argv[2])
	}
	if err := s.Commit(ctx, "w.service"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(conn.calls, ";"), "stop "+WatcherUnit("w.service")) {
		t.Errorf("Commit did not stop the watcher: %v", conn.calls)
	}
	// The next staging starts it again.
	if _, err := s.Stage(ctx, "w.service", []byte("[Service]\nExecStart=/b\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Discard(ctx, "w.service"); err != nil {
		t.Fatal(err)
	}
	calls = strings.Join(conn.calls, ";")
	if strings.Count(calls, "transient ") != 2 || strings.Count(calls, "stop "+WatcherUnit("w.service")) != 2 {
		t.Errorf("after a second stage and a discard: calls %v, want the watcher started and stopped twice", conn.calls)
	}
}

// The watcher's script waits while the process that staged the unit lives, and once it
// ended (or its PID names another process) drops the staged file, reloads systemd and
// restarts the unit from /etc, or stops it when /etc has none; it leaves a file a promote
// already dropped alone.
func TestUnstageScript(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(dir, "systemctl.log")
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\necho \"$@\" >>"+logf+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	staged, persistent := filepath.Join(dir, "run.service"), filepath.Join(dir, "etc.service")
	run := func(ctx context.Context, pid, start string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", unstageScript, "sglprov-unstage", pid, start, "u.service", staged, persistent)
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		return cmd
	}
	write := func(p string) {
		if err := os.WriteFile(p, []byte("[Service]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	readLog := func() string { b, _ := os.ReadFile(logf); _ = os.Remove(logf); return string(b) }
	self, err := selfStartTime()
	if err != nil {
		t.Fatal(err)
	}
	// This process lives: the script waits, and the staged file stays.
	write(staged)
	write(persistent)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	out, _ := run(ctx, strconv.Itoa(os.Getpid()), self).CombinedOutput()
	cancel()
	if _, err := os.Stat(staged); err != nil || readLog() != "" {
		t.Fatalf("while the staging process lives the script dropped the unit (%v) or called systemctl; output %q", err, out)
	}
	// The PID names a process that started at another time: the stager is gone.
	if out, err := run(context.Background(), strconv.Itoa(os.Getpid()), "1").CombinedOutput(); err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	if _, err := os.Stat(staged); err == nil {
		t.Errorf("the staged file is still there after its stager ended")
	}
	if got := readLog(); got != "daemon-reload\nrestart u.service\n" {
		t.Errorf("systemctl calls %q, want a reload and a restart of the unit in /etc", got)
	}
	// A process that ended; no unit in /etc (a first install): the candidate is stopped.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	write(staged)
	_ = os.Remove(persistent)
	if out, err := run(context.Background(), strconv.Itoa(done.Process.Pid), self).CombinedOutput(); err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	if got := readLog(); got != "daemon-reload\nstop u.service\n" {
		t.Errorf("systemctl calls %q, want a reload and a stop", got)
	}
	// Nothing staged any more (promoted): nothing done.
	if out, err := run(context.Background(), strconv.Itoa(done.Process.Pid), self).CombinedOutput(); err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	if got := readLog(); got != "" {
		t.Errorf("with nothing staged the script called systemctl: %q", got)
	}
}
