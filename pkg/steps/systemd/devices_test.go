package systemd

import (
	"strings"
	"testing"
)

// A recipe given some GPUs renders a unit whose server sees those only: --tp follows
// their count and CUDA_VISIBLE_DEVICES names their UUIDs; the whole host sets neither.
func TestUnitFollowsSelectedGPUs(t *testing.T) {
	env := testEnv(t, "rtx-pro-6000-x8.json")
	whole := env.Facts
	spec := qwenSpec()
	spec.Profiles = nil
	s := newStep(t, spec)
	unit, err := s.render(env, "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(unit), "CUDA_VISIBLE_DEVICES") {
		t.Errorf("the whole host's unit sets CUDA_VISIBLE_DEVICES:\n%s", unit)
	}
	sub, err := whole.Subset([]string{"4", "5", "6", whole.GPUs[7].UUID})
	if err != nil {
		t.Fatal(err)
	}
	env.Facts = sub
	unit, err = s.render(env, "")
	if err != nil {
		t.Fatal(err)
	}
	want := "CUDA_VISIBLE_DEVICES=" + strings.Join([]string{whole.GPUs[4].UUID, whole.GPUs[5].UUID, whole.GPUs[6].UUID, whole.GPUs[7].UUID}, ",")
	if !strings.Contains(string(unit), want) {
		t.Errorf("the unit lacks %s:\n%s", want, unit)
	}
	if line := execStart(t, unit); !strings.Contains(line, " --tp 4") {
		t.Errorf("ExecStart=%s, want --tp 4 for four selected GPUs", line)
	}
}
