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
