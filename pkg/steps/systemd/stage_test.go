package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/atomicfile"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/switchover"
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

// switchTo runs the step's switch to profiles with a gate that passes the profiles in
// pass (and what is restored, profile ""); during each gate it calls during.
func switchTo(t *testing.T, s *Step, env *engine.Env, profiles []string, pass []string, during func(srv switchover.Server)) (*switchover.Result, error) {
	t.Helper()
	ctx := context.Background()
	sw, err := s.Switch(ctx, env, profiles)
	if err != nil {
		t.Fatalf("Switch: %v", err)
	}
	sw.Gate = func(_ context.Context, srv switchover.Server) (switchover.Verdict, error) {
		if during != nil {
			during(srv)
		}
		ok := srv.Profile == "" || slices.Contains(pass, srv.Profile)
		return switchover.Verdict{Pass: ok, Summary: "fake"}, nil
	}
	res, err := sw.Run(ctx)
	if rerr := s.Switched(ctx, env, res); rerr != nil {
		t.Fatalf("Switched: %v", rerr)
	}
	return res, err
}

// A unit a gate decides on is staged by the gate's switch: the persistent unit (what a
// reboot starts) changes only once the gate passed; a failed gate drops the staged unit
// and restarts the persistent one. A model switch stops the replaced recipe's unit for
// this boot only, and starts it again when the gate fails.
func TestStagedUnitKeptOnlyWhenTheGatePasses(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Gated = true
	ctx := context.Background()
	spec := qwenSpec()
	s := newStep(t, spec)
	sm := &stagingManager{fakeManager: &fakeManager{dir: t.TempDir()}, runDir: t.TempDir(), inUse: map[string]bool{}}
	env.NewManager = func(context.Context, service.Options) (service.Manager, error) { return sm, nil }

	if err := s.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if sm.Persistent(spec.Unit) || sm.Staged(spec.Unit) || len(sm.take()) != 0 {
		t.Fatalf("the gated step's Run changed the node: persistent %v, staged %v", sm.Persistent(spec.Unit), sm.Staged(spec.Unit))
	}
	if _, err := switchTo(t, s, env, []string{"sm120-fp4-cudnn"}, []string{"sm120-fp4-cudnn"}, func(switchover.Server) {
		if sm.Persistent(spec.Unit) || !sm.Staged(spec.Unit) {
			t.Errorf("during the gate: persistent %v, staged %v; want staged only", sm.Persistent(spec.Unit), sm.Staged(spec.Unit))
		}
		if ok, reason, _ := s.Intact(ctx, env); ok || !strings.Contains(reason, "staged") {
			t.Errorf("Intact with a staged unit = %v %q", ok, reason)
		}
	}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(sm.UnitPath(spec.Unit))
	if sm.Staged(spec.Unit) || !bytes.Contains(good, []byte("Profile: sm120-fp4-cudnn.")) {
		t.Fatalf("after the gate passed: staged %v, persistent %q", sm.Staged(spec.Unit), good)
	}

	// The next change is staged; its gate fails; the persistent unit was never touched.
	sm.take()
	_, err := switchTo(t, s, env, []string{"sm120-fp4-cutlass"}, nil, func(srv switchover.Server) {
		if b, _ := os.ReadFile(sm.UnitPath(spec.Unit)); !bytes.Equal(b, good) {
			t.Error("the switch rewrote the persistent unit before its gate")
		}
		// The candidate is gated on a side port, named by its staged unit.
		staged, _ := os.ReadFile(filepath.Join(sm.runDir, spec.Unit))
		if srv.Profile != "" && (srv.Port == DefaultPort || !bytes.Contains(staged, fmt.Appendf(nil, "--port %d\n", srv.Port))) {
			t.Errorf("the candidate was gated on port %d, want a side port named by its staged unit:\n%s", srv.Port, staged)
		}
	})
	if !errors.Is(err, &switchover.FailedError{}) && err == nil {
		t.Fatal("a failed gate passed the switch")
	}
	if sm.Staged(spec.Unit) || s.Active(env) != "sm120-fp4-cudnn" {
		t.Errorf("after the restore: staged %v, active %q", sm.Staged(spec.Unit), s.Active(env))
	}
	// Staged on a side port (no drain hook), where it fails.
	if diff := cmp.Diff([]string{"stage", "restart", "discard", "restart"}, sm.take()); diff != "" {
		t.Errorf("switch then restore (-want +got):\n%s", diff)
	}

	// A model switch: recipe "old-model"'s unit is in use and named by its header.
	old := service.Header("old-model", "p", "f") + "[Service]\nExecStart=/old --model-path /m/old\n"
	if err := os.WriteFile(sm.UnitPath("sglang-old.service"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	sm.inUse["sglang-old.service"] = true
	env.Replaces = []string{"old-model"}
	if ok, reason, _ := s.Intact(ctx, env); ok || !strings.Contains(reason, "sglang-old.service (recipe old-model)") {
		t.Errorf("Intact while a replaced unit serves = %v %q", ok, reason)
	}
	res, err := switchTo(t, s, env, []string{"sm120-fp4-cutlass"}, nil, func(switchover.Server) {
		if !sm.inUse["sglang-old.service"] {
			t.Error("the replaced unit was disabled before the gate passed")
		}
	})
	if err == nil || !res.Replaced || !strings.Contains(err.Error(), "what it replaced (sglang-old.service) was restored") {
		t.Fatalf("failed model switch: %v", err)
	}
	if diff := cmp.Diff([]string{"stop", "stage", "restart", "discard", "stop", "start"}, sm.take()); diff != "" {
		t.Errorf("switch then restore (-want +got):\n%s", diff)
	}
}

// A switch gates a candidate on a side port unless the recipe has drain hooks or runs
// across nodes; the recipe's stage says otherwise.
func TestSwitchStaging(t *testing.T) {
	ctx := context.Background()
	drain := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name  string
		stage string
		drain bool
		group bool
		want  switchover.Staging
	}{
		{name: "default", want: switchover.StageSidePort},
		{name: "drain hooks", drain: true, want: switchover.StageServed},
		{name: "group", group: true, want: switchover.StageServed},
		{name: "port with drain hooks", stage: "port", drain: true, want: switchover.StageSidePort},
		{name: "served", stage: "served", want: switchover.StageServed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, "rtx-pro-6000-x8.json")
			spec := qwenSpec()
			spec.Stage = tc.stage
			s := newStep(t, spec)
			fm := &fakeManager{dir: t.TempDir()}
			env.NewManager = func(context.Context, service.Options) (service.Manager, error) { return fm, nil }
			if tc.drain {
				env.Drain = drain
			}
			if tc.group {
				env.Nodes = &recipe.NodesConfig{}
			}
			sw, err := s.Switch(ctx, env, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sw.Stage != tc.want {
				t.Errorf("stage %q, want %q", sw.Stage, tc.want)
			}
		})
	}
	spec := qwenSpec()
	spec.Stage = "side"
	if _, err := spec.check(); err == nil || !strings.Contains(err.Error(), "stage") {
		t.Errorf("check of stage: side = %v, want an error", err)
	}
}

// Serving reads the server from the installed unit (where it listens, what it serves),
// and from the unit rendered for the active profile before one is installed.
func TestServingReadsTheInstalledUnit(t *testing.T) {
	ctx := context.Background()
	env := testEnv(t, "rtx-pro-6000-x8.json")
	s := newStep(t, qwenSpec())
	fm := &fakeManager{dir: t.TempDir()}
	env.NewManager = func(context.Context, service.Options) (service.Manager, error) { return fm, nil }
	srv, err := s.Serving(ctx, env)
	if err != nil || srv.Port != DefaultPort || srv.ModelPath == "" {
		t.Fatalf("Serving before an install: %+v, %v; want the rendered unit's port %d", srv, err, DefaultPort)
	}
	rendered, err := s.render(env, "")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := switchover.WithPort(qwenSpec().Unit, rendered, 31999)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fm.UnitPath(qwenSpec().Unit), moved, 0o644); err != nil {
		t.Fatal(err)
	}
	if srv, err := s.Serving(ctx, env); err != nil || srv.Port != 31999 || !srv.Listens {
		t.Errorf("Serving of the installed unit: %+v, %v; want port 31999", srv, err)
	}
}
