package systemd

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"charm.land/log/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
)

// A profile with a check is a candidate only when its command exits 0; a refusal is
// logged with the command's last line, and is the reason when nothing else matches.
func TestProfileCheck(t *testing.T) {
	fusion := func(argv ...string) recipe.Profile {
		return recipe.Profile{
			Match: recipe.ProfileMatch{ComputeCapability: "12.0", Quantization: "modelopt_fp4", Check: argv},
			Args:  []string{"--enable-flashinfer-allreduce-fusion"},
		}
	}
	tests := []struct {
		name     string
		check    []string
		profiles []string
		want     []string
		wantErr  string
		logged   string
	}{
		{name: "check passes: first candidate",
			check:    []string{"sh", "-c", "exit 0"},
			profiles: []string{"sm120-ar-fusion", "sm120-fp4-cudnn"},
			want:     []string{"sm120-ar-fusion", "sm120-fp4-cudnn"}},
		{name: "check refuses: passed over, reason logged",
			check:    []string{"sh", "-c", "echo probing >&2; echo 'GPU 0 cannot access GPU 3 (no peer path)' >&2; exit 1"},
			profiles: []string{"sm120-ar-fusion", "sm120-fp4-cudnn"},
			want:     []string{"sm120-fp4-cudnn"},
			logged:   "GPU 0 cannot access GPU 3 (no peer path)"},
		{name: "only the checked profile, refused: the reason is the error",
			check:    []string{"sh", "-c", "echo 'flashinfer 0.6.3 has no SM12x all-reduce' ; exit 3"},
			profiles: []string{"sm120-ar-fusion"},
			wantErr:  "sm120-ar-fusion refused by its check: flashinfer 0.6.3 has no SM12x all-reduce"},
		{name: "silent failure names the status",
			check:    []string{"sh", "-c", "exit 4"},
			profiles: []string{"sm120-ar-fusion"},
			wantErr:  "check sh exited with status 4"},
		{name: "missing command",
			check:    []string{"/nonexistent/python", "check.py"},
			profiles: []string{"sm120-ar-fusion"},
			wantErr:  "check /nonexistent/python:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testEnv(t, "rtx-pro-6000-x8.json")
			var logs bytes.Buffer
			env.Log = log.New(&logs)
			env.Profiles["sm120-ar-fusion"] = fusion(tt.check...)
			spec := qwenSpec()
			spec.Profiles = tt.profiles
			s := newStep(t, spec)
			got, err := s.candidates(env)
			if tt.wantErr != "" {
				if !errors.Is(err, exitcode.ErrHost) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want ErrHost mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
			if tt.logged != "" && !strings.Contains(logs.String(), tt.logged) {
				t.Errorf("log %q does not name the refusal %q", logs.String(), tt.logged)
			}
		})
	}
}

func TestRunCheckTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := runCheck(ctx, []string{"sleep", "5"}); !strings.Contains(got, "did not finish") {
		t.Errorf("runCheck on a canceled context = %q", got)
	}
}
