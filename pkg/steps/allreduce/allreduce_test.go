package allreduce

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gpu"
)

// fakePython stands in for the service's interpreter: it writes the result the real check
// would (busbw as given) to --out, or sleeps, as told by the environment.
const fakePython = `#!/bin/sh
out=""
gpus=0
while [ $# -gt 0 ]; do
  case "$1" in --out) out="$2"; shift;; --gpus) gpus="$2"; shift;; esac
  shift
done
[ -n "$FAKE_SLEEP" ] && sleep "$FAKE_SLEEP"
echo "fake all-reduce over $gpus ranks"
printf '{"ranks": %s, "bytes": 268435456, "iters": 20, "time_s": 0.01, "algbw_gbps": 26.8, "busbw_gbps": %s, "correct": %s, "torch": "2.9.1", "nccl": "2.27.7", "gpu": "fake"}' \
  "${FAKE_RANKS:-$gpus}" "$FAKE_BUSBW" "${FAKE_CORRECT:-true}" > "$out"
`

func setup(t *testing.T, spec Spec) (*Step, *engine.Env) {
	t.Helper()
	dir := t.TempDir()
	py := filepath.Join(dir, "python")
	if err := os.WriteFile(py, []byte(fakePython), 0o755); err != nil {
		t.Fatal(err)
	}
	spec.Python = py
	st, err := Kind().New("fabric", &spec)
	if err != nil {
		t.Fatal(err)
	}
	env := engine.NewTestEnv(dir, nil)
	if err := os.MkdirAll(env.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	env.Facts = &gpu.Facts{DriverVersion: "580.95.05", GPUs: []gpu.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}}
	return st.(*Step), env
}

func TestMeetsThreshold(t *testing.T) {
	t.Setenv("FAKE_BUSBW", "41.5")
	s, env := setup(t, Spec{MinBusBWGBps: 40})
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ok, why, err := s.Intact(context.Background(), env)
	if !ok || err != nil {
		t.Errorf("Intact = %v %q %v", ok, why, err)
	}
}

// Below the threshold: refused with the measured figure, exit 4, and nothing recorded.
func TestBelowThreshold(t *testing.T) {
	t.Setenv("FAKE_BUSBW", "12.25")
	s, env := setup(t, Spec{MinBusBWGBps: 40})
	err := s.Run(context.Background(), env)
	if err == nil || exitcode.Of(err) != exitcode.ExitHost {
		t.Fatalf("Run = %v, want exit 4", err)
	}
	for _, want := range []string{"all-reduce bus bandwidth over 2 GPUs is 12.2 GB/s", "at least 40.0 GB/s", "NCCL 2.27.7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if ok, _, _ := s.Intact(context.Background(), env); ok {
		t.Error("a failed check is intact")
	}
}

func TestWrongSums(t *testing.T) {
	t.Setenv("FAKE_BUSBW", "50")
	t.Setenv("FAKE_CORRECT", "false")
	s, env := setup(t, Spec{})
	if err := s.Run(context.Background(), env); err == nil || !strings.Contains(err.Error(), "wrong sums") {
		t.Fatalf("Run = %v", err)
	}
}

// A result over fewer ranks than the GPUs the check was to use (one rank on a two-GPU
// check: a bus bandwidth of 0 that no threshold applies to) is refused, exit 4, and not
// recorded; a recorded result over another count than the host's GPUs is not intact.
func TestRanksOtherThanTheGPUs(t *testing.T) {
	t.Setenv("FAKE_BUSBW", "0")
	t.Setenv("FAKE_RANKS", "1")
	s, env := setup(t, Spec{MinBusBWGBps: 40})
	err := s.Run(context.Background(), env)
	if err == nil || exitcode.Of(err) != exitcode.ExitHost || !strings.Contains(err.Error(), "reported 1 ranks, not the 2 GPUs it was to run on") {
		t.Fatalf("Run = %v, want exit 4 naming 1 rank of 2", err)
	}
	if ok, _, _ := s.Intact(context.Background(), env); ok {
		t.Error("a refused check is intact")
	}
	t.Setenv("FAKE_RANKS", "")
	t.Setenv("FAKE_BUSBW", "41.5")
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("Run over both GPUs: %v", err)
	}
	env.Facts.GPUs = append(env.Facts.GPUs, gpu.Device{Index: 2, UUID: "GPU-c"})
	if ok, why, _ := s.Intact(context.Background(), env); ok || !strings.Contains(why, "reported 2 ranks, not the 3 GPUs") {
		t.Errorf("Intact with a third GPU = %v %q", ok, why)
	}
}

// A check that hangs (NCCL waiting on a blocked P2P path) is ended at its timeout.
func TestTimeout(t *testing.T) {
	t.Setenv("FAKE_BUSBW", "50")
	t.Setenv("FAKE_SLEEP", "30")
	s, env := setup(t, Spec{Timeout: "1s"})
	err := s.Run(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "did not finish within 1s") {
		t.Fatalf("Run = %v", err)
	}
}

func TestBadSpec(t *testing.T) {
	for _, spec := range []Spec{{}, {Python: "p", Timeout: "soon"}, {Python: "p", GPUs: -1}} {
		if _, err := Kind().New("x", &spec); !errors.Is(err, exitcode.ErrUsage) {
			t.Errorf("%+v: %v, want a usage error", spec, err)
		}
	}
}
