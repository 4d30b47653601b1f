package exitcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("plain"), ExitFailed},
		{fmt.Errorf("step x: %w", ErrUsage), ExitUsage},
		{fmt.Errorf("gate: %w", ErrGate), ExitGate},
		{fmt.Errorf("%w: GPU 0 has 9.0", ErrHost), ExitHost},
		{fmt.Errorf("%w: no revision", ErrMissing), ExitHost},
		{ErrLocked, ExitLocked},
		{fmt.Errorf("nvml: %w", ErrReboot), ExitReboot},
		{fmt.Errorf("cancelled: %w", ErrInterrupted), ExitInterrupted},
		{errors.Join(errors.New("a"), fmt.Errorf("b: %w", ErrGate)), ExitGate},
	}
	for _, tc := range tests {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestErr: Err is Of's inverse for every marked code, and nil for the others.
func TestErr(t *testing.T) {
	for _, code := range []int{ExitUsage, ExitGate, ExitHost, ExitLocked, ExitReboot, ExitInterrupted} {
		if err := Err(code); err == nil || Of(err) != code {
			t.Errorf("Err(%d) = %v, which Of maps to %d", code, err, Of(err))
		}
	}
	if Err(ExitHost) != ErrHost {
		t.Errorf("Err(%d) = %v, want ErrHost", ExitHost, Err(ExitHost))
	}
	for _, code := range []int{ExitOK, ExitFailed, 7, 137} {
		if err := Err(code); err != nil {
			t.Errorf("Err(%d) = %v, want nil", code, err)
		}
	}
}

// TestMessageDropsTheUsageClass: the class text that %w put beside the real message goes;
// the real text stays whole.
func TestMessageDropsTheUsageClass(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("source ref %q is not a commit: %w", "main", ErrUsage), `source ref "main" is not a commit`},
		{fmt.Errorf("%w: r.yaml:9:5: step %q: systemd: %w: model_path is required", ErrUsage, "svc", ErrUsage), `r.yaml:9:5: step "svc": systemd: model_path is required`},
		{fmt.Errorf("%w: 2 problems in the recipe:\nr.yaml:4:1: unknown field", ErrUsage), "2 problems in the recipe:\nr.yaml:4:1: unknown field"},
		{errors.Join(fmt.Errorf("step a: dir is required: %w", ErrUsage), fmt.Errorf("step b: %w: profile %q is not defined", ErrUsage, "p")), "step a: dir is required\nstep b: profile \"p\" is not defined"},
		{fmt.Errorf("gate: %w", ErrGate), "gate: smoke gate failed"},
		{ErrUsage, "invalid usage or recipe"},
	}
	for _, tc := range tests {
		if got := Message(tc.err); got != tc.want {
			t.Errorf("Message(%q) =\n  %q\nwant\n  %q", tc.err, got, tc.want)
		}
	}
}
