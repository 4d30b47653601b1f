package engine

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// The daemon holds the node's lock between its applies, noted as its: a second run is
// refused (exit 5) with the daemon's pid and what to do, and readers can tell a daemon at
// rest from an apply running.
func TestDaemonLockNote(t *testing.T) {
	dir := t.TempDir()
	l, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := l.SetNote(NoteDaemon); err != nil {
		t.Fatal(err)
	}
	if pid, note := LockHolder(dir), LockNote(dir); pid != os.Getpid() || note != NoteDaemon {
		t.Errorf("holder %d %q", pid, note)
	}
	_, err = AcquireLock(dir)
	if !errors.Is(err, exitcode.ErrLocked) || exitcode.Of(err) != exitcode.ExitLocked {
		t.Fatalf("second lock: %v", err)
	}
	want := "the sglprov daemon, pid " + strconv.Itoa(os.Getpid()) + ", holds "
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "send it SIGHUP to re-read the recipe") {
		t.Errorf("second lock: %v; want it to name %q", err, want)
	}
	if err := l.SetNote(NoteDaemonApplying); err != nil || LockNote(dir) != NoteDaemonApplying {
		t.Errorf("applying note: %v %q", err, LockNote(dir))
	}
	if err := l.SetNote(""); err != nil || LockNote(dir) != "" || LockHolder(dir) != os.Getpid() {
		t.Errorf("plain note: %v %q", err, LockNote(dir))
	}
}
