package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
