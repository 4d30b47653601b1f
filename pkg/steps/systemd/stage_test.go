package systemd

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/service"
)

// stagingManager is fakeManager with systemd's runtime/persistent split (service.Stager)
// and enable/disable (service.Switcher): a staged unit in its own folder wins over the
// persistent one, as /run/systemd/system.control wins over /etc/systemd/system.
type stagingManager struct {
	*fakeManager
	runDir string
	inUse  map[string]bool
}

func (m *stagingManager) Stage(_ context.Context, unit string, content []byte) (bool, error) {
	persistent, _ := os.ReadFile(m.UnitPath(unit))
	staged, err := os.ReadFile(filepath.Join(m.runDir, unit))
	effective := persistent
	if err == nil {
		effective = staged
	}
	m.op("stage")
	if persistent != nil && bytes.Equal(persistent, content) {
		_ = os.Remove(filepath.Join(m.runDir, unit))
		return !bytes.Equal(effective, content), nil
	}
	_, err = atomicfile.WriteIfChanged(filepath.Join(m.runDir, unit), content, 0o644)
	return !bytes.Equal(effective, content), err
}

func (m *stagingManager) Commit(_ context.Context, unit string) error {
	m.op("commit")
	b, err := os.ReadFile(filepath.Join(m.runDir, unit))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.WriteFile(m.UnitPath(unit), b, 0o644); err != nil {
		return err
	}
	return os.Remove(filepath.Join(m.runDir, unit))
}

func (m *stagingManager) Discard(_ context.Context, unit string) (bool, error) {
	m.op("discard")
	err := os.Remove(filepath.Join(m.runDir, unit))
	return err == nil, nil
}

func (m *stagingManager) Staged(unit string) bool {
	_, err := os.Stat(filepath.Join(m.runDir, unit))
	return err == nil
}

func (m *stagingManager) Persistent(unit string) bool {
	_, err := os.Stat(m.UnitPath(unit))
	return err == nil
}

func (m *stagingManager) Disable(_ context.Context, unit string) error {
	m.op("disable " + unit)
	m.inUse[unit] = false
	return nil
}

func (m *stagingManager) Enable(_ context.Context, unit string) error {
	m.op("enable " + unit)
	m.inUse[unit] = true
	return nil
}

func (m *stagingManager) InUse(_ context.Context, unit string) (bool, error) {
	return m.inUse[unit], nil
}

// A unit a gate decides on is staged: the persistent unit (what a reboot starts) changes
// only once the gate passed; a failed gate drops the staged unit and restarts the
// persistent one. A switch stops and disables the replaced recipe's unit before its own
// starts, and brings it back when the gate fails.
func TestStagedUnitKeptOnlyWhenTheGatePasses(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Gated = true
	ctx := context.Background()
	spec := qwenSpec()
	s := newStep(t, spec)
	sm := &stagingManager{fakeManager: &fakeManager{dir: t.TempDir()}, runDir: t.TempDir(), inUse: map[string]bool{}}
	s.newManager = func(context.Context, service.Options) (service.Manager, error) { return sm, nil }

	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if sm.Persistent(spec.Unit) || !sm.Staged(spec.Unit) {
		t.Fatalf("before the gate: persistent %v, staged %v; want staged only", sm.Persistent(spec.Unit), sm.Staged(spec.Unit))
	}
	if ok, reason, _ := s.Intact(ctx, env); ok || !strings.Contains(reason, "staged") {
		t.Errorf("Intact with a staged unit = %v %q", ok, reason)
	}
	if err := s.Won(ctx, env, "sm120-fp4-cudnn"); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(sm.UnitPath(spec.Unit))
	if sm.Staged(spec.Unit) || !bytes.Contains(good, []byte("Profile: sm120-fp4-cudnn.")) {
		t.Fatalf("after the gate passed: staged %v, persistent %q", sm.Staged(spec.Unit), good)
	}

	// The next change is staged; its gate fails; the persistent unit was never touched.
	sm.take()
	if err := s.Activate(ctx, env, "sm120-fp4-cutlass"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(sm.UnitPath(spec.Unit)); !bytes.Equal(b, good) {
		t.Fatal("activating a profile rewrote the persistent unit before its gate")
	}
	if ok, err := s.RestoreLastKnownGood(ctx, env); err != nil || !ok {
		t.Fatalf("RestoreLastKnownGood = %v %v", ok, err)
	}
	if sm.Staged(spec.Unit) || s.Active(env) != "sm120-fp4-cudnn" {
		t.Errorf("after the restore: staged %v, active %q", sm.Staged(spec.Unit), s.Active(env))
	}
	if diff := cmp.Diff([]string{"stage", "restart", "discard", "restart"}, sm.take()); diff != "" {
		t.Errorf("activate then restore (-want +got):\n%s", diff)
	}

	// A switch: recipe "old-model"'s unit is in use and named by its header.
	old := service.Header("old-model", "p", "f") + "[Service]\nExecStart=/old\n"
	if err := os.WriteFile(sm.UnitPath("sglang-old.service"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	sm.inUse["sglang-old.service"] = true
	env.Replaces = []string{"old-model"}
	if ok, reason, _ := s.Intact(ctx, env); ok || !strings.Contains(reason, "sglang-old.service (recipe old-model)") {
		t.Errorf("Intact while a replaced unit serves = %v %q", ok, reason)
	}
	if err := s.Activate(ctx, env, "sm120-fp4-cutlass"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.RestoreLastKnownGood(ctx, env); err != nil || !ok {
		t.Fatalf("RestoreLastKnownGood after a switch = %v %v", ok, err)
	}
	if diff := cmp.Diff([]string{"disable sglang-old.service", "stage", "restart", "discard", "stop", "enable sglang-old.service"}, sm.take()); diff != "" {
		t.Errorf("switch then restore (-want +got):\n%s", diff)
	}
	if !strings.Contains(s.Restored(), "sglang-old.service") {
		t.Errorf("Restored = %q, want the replaced unit named", s.Restored())
	}
}
