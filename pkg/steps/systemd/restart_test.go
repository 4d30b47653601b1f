package systemd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sglprov/sglprov/pkg/service"
)

// The daemon's restart rung restarts the unit that serves, never one rendered from the
// engine it holds: after a switch to an edited recipe failed its gate and the last unit
// that passed was restored, a restart through the edited recipe's step brings back the
// restored unit (the persistent one under systemd, the last-known-good under exec), not
// the candidate that failed.
func TestRestartRungRestartsTheServingUnit(t *testing.T) {
	for _, staging := range []bool{true, false} {
		name := "exec"
		if staging {
			name = "systemd"
		}
		t.Run(name, func(t *testing.T) {
			env := testEnv(t, "rtx-pro-6000-x8.json")
			env.Gated = true
			ctx := context.Background()
			s := newStep(t, qwenSpec())
			fm := &fakeManager{dir: t.TempDir()}
			var m service.Manager = fm
			var sm *stagingManager
			if staging {
				sm = &stagingManager{fakeManager: fm, runDir: t.TempDir(), inUse: map[string]bool{}}
				m = sm
			}
			env.NewManager = func(context.Context, service.Options) (service.Manager, error) { return m, nil }
			if _, err := switchTo(t, s, env, []string{"sm120-fp4-cudnn"}, []string{"sm120-fp4-cudnn"}, nil); err != nil {
				t.Fatal(err)
			}
			good, err := os.ReadFile(fm.UnitPath("sglang-qwen.service"))
			if err != nil {
				t.Fatal(err)
			}

			// The recipe is edited; the daemon's apply of it fails its gate.
			spec := qwenSpec()
			spec.Args = append(spec.Args, "--mem-fraction-static", "0.85")
			edited := newStep(t, spec)
			if _, err := switchTo(t, edited, env, []string{"sm120-fp4-cudnn"}, nil, nil); err == nil {
				t.Fatal("a failed gate passed the switch")
			}
			fm.take()

			if err := edited.Restart(ctx, env); err != nil {
				t.Fatalf("Restart: %v", err)
			}
			inEffect, _ := os.ReadFile(fm.UnitPath("sglang-qwen.service"))
			if staging {
				if b, err := os.ReadFile(filepath.Join(sm.runDir, "sglang-qwen.service")); err == nil {
					inEffect = b
				}
			}
			if !bytes.Equal(inEffect, good) || bytes.Contains(inEffect, []byte("--mem-fraction-static")) {
				t.Errorf("the restart put in effect a unit other than the one that passed:\n%s", inEffect)
			}
			if ops := fm.take(); !slices.Contains(ops, "restart") {
				t.Errorf("the restart rung did not restart the service: %v", ops)
			}
			if s.Active(env) != "sm120-fp4-cudnn" {
				t.Errorf("Active after the restart = %q", s.Active(env))
			}
		})
	}
}
