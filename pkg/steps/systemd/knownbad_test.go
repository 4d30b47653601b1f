package systemd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/service"
	"github.com/sglprov/sglprov/pkg/switchover"
)

// writeDist writes a distribution's METADATA into a venv's site-packages under dir.
func writeDist(t *testing.T, dir, name, version string) {
	t.Helper()
	d := filepath.Join(dir, "venv/lib/python3.12/site-packages", strings.ReplaceAll(name, "-", "_")+"-"+version+".dist-info")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\nSummary: x\n\nBody: Version: 0\n"
	if err := os.WriteFile(filepath.Join(d, "METADATA"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKnownBadInstalledRefusesBeforeStart: a venv that holds nvidia-cutlass-dsl 4.5.0 on
// the RTX PRO 6000 host is refused before the unit is installed or started, with exit 4
// naming the row, the version and the fix (plan runs the same check through KnownBad); with
// 4.5.1 the server starts.
func TestKnownBadInstalledRefusesBeforeStart(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	dir := t.TempDir()
	writeTool(t, filepath.Join(dir, "venv/bin"), "python")
	writeDist(t, dir, "nvidia-cutlass-dsl", "4.5.0")
	writeDist(t, dir, "flashinfer-python", "0.6.9")
	spec := qwenSpec()
	spec.Command = []string{filepath.Join(dir, "venv/bin/python"), "-m", "sglang.launch_server"}
	s := newStep(t, spec)
	fm := withFake(t, env)
	err := s.KnownBad(env)
	if err == nil || !errors.Is(err, exitcode.ErrHost) || exitcode.Of(err) != exitcode.ExitHost {
		t.Fatalf("KnownBad: %v (exit %d)", err, exitcode.Of(err))
	}
	// Not a Blackwell host: the row is for sm_12x only.
	if err := s.KnownBad(testEnv(t, "h100-x8.json")); err != nil {
		t.Errorf("H100: %v", err)
	}
	err = s.Run(context.Background(), env)
	if err == nil || exitcode.Of(err) != exitcode.ExitHost {
		t.Fatalf("Run: %v", err)
	}
	for _, want := range []string{"[cutlass-dsl-4.5.0-sm12x]", "nvidia-cutlass-dsl 4.5.0", "sm_120",
		"fix: nvidia-cutlass-dsl 4.5.1 or later", "cutlass/issues/3227", filepath.Join(dir, "venv")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if ops := fm.take(); len(ops) != 0 {
		t.Errorf("the refused step still did %v", ops)
	}
	if err := os.RemoveAll(filepath.Join(dir, "venv/lib/python3.12/site-packages/nvidia_cutlass_dsl-4.5.0.dist-info")); err != nil {
		t.Fatal(err)
	}
	writeDist(t, dir, "nvidia-cutlass-dsl", "4.5.1")
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("Run with 4.5.1: %v", err)
	}
}

// The last good unit is restored after a candidate fails its gate even when the
// environment changed under the candidate into one the known-bad table refuses: before
// the restore only the port is checked, since the restored unit's own packages and flags
// passed with it (the table's refusal is for what starts anew).
func TestRestoreIsNotRefusedForTheCandidatesPackages(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	env.Gated = true
	dir := t.TempDir()
	writeTool(t, filepath.Join(dir, "venv/bin"), "python")
	writeDist(t, dir, "flashinfer-python", "0.6.9")
	writeDist(t, dir, "nvidia-cutlass-dsl", "4.5.1")
	spec := qwenSpec()
	spec.Command = []string{filepath.Join(dir, "venv/bin/python"), "-m", "sglang.launch_server"}
	s := newStep(t, spec)
	sm := &stagingManager{fakeManager: &fakeManager{dir: t.TempDir()}, runDir: t.TempDir(), inUse: map[string]bool{}}
	env.NewManager = func(context.Context, service.Options) (service.Manager, error) { return sm, nil }
	if _, err := switchTo(t, s, env, []string{"sm120-fp4-cudnn"}, []string{"sm120-fp4-cudnn"}, nil); err != nil {
		t.Fatal(err)
	}
	// The candidate starts, and while it is gated its environment takes a known-bad package.
	res, err := switchTo(t, s, env, []string{"sm120-fp4-cutlass"}, nil, func(srv switchover.Server) {
		if srv.Profile != "sm120-fp4-cutlass" {
			return
		}
		os.RemoveAll(filepath.Join(dir, "venv/lib/python3.12/site-packages/nvidia_cutlass_dsl-4.5.1.dist-info"))
		writeDist(t, dir, "nvidia-cutlass-dsl", "4.5.0")
	})
	if err == nil {
		t.Fatal("a candidate that failed its gate passed the switch")
	}
	if res == nil || !res.Restored || res.RestoreErr != nil {
		t.Fatalf("the last good unit was not restored: restored %v, error %v", res != nil && res.Restored, res.RestoreErr)
	}
	good, _ := os.ReadFile(sm.UnitPath(spec.Unit))
	if !bytes.Contains(good, []byte("Profile: sm120-fp4-cudnn.")) {
		t.Errorf("the persistent unit changed: %q", good)
	}
}
