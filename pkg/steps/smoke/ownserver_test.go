package smoke

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gatedswitch"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// TestGateChecksItsOwnServer: the gate judges the unit's server only: a server on the port
// that lists another model, or loaded another model path, fails the gate with both names
// before a case is asked; the unit's own server passes.
func TestGateChecksItsOwnServer(t *testing.T) {
	tests := []struct {
		name, served, path, want string
	}{
		{"own server", "qwen", "default", ""},
		{"another model listed", "qwen-b", "/models/b",
			`serves "qwen" (/v1/models), not the recipe's "qwen-b": another server holds the port`},
		{"another model path", "qwen", "/models/b",
			`loaded model_path "default" (/get_model_info), not the recipe's "/models/b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFakeService(t, []string{"good"}, map[string]fakesglang.Mode{"good": fakesglang.ModeGood})
			fs.served, fs.path = tt.served, tt.path
			svc := fs
			step, err := New("smoke", testSpec(fs.srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			env, out := newEnv(t, map[string]engine.Step{"sglang-service": svc})
			err = step.Run(context.Background(), env)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Run: %v\n%s", err, out)
				}
				return
			}
			if !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run: %v, want a gate failure with %q", err, tt.want)
			}
			if strings.Contains(out.String(), "arithmetic") {
				t.Errorf("cases were asked of a server that is not the unit's:\n%s", out)
			}
		})
	}
}

// TestGateWithoutServiceChecksNamedModel: without a service step, a model the recipe names
// must be listed by the server at the URL.
func TestGateWithoutServiceChecksNamedModel(t *testing.T) {
	srv := httptest.NewServer(fakesglang.New(fakesglang.Options{Model: "qwen-a"}))
	defer srv.Close()
	spec := testSpec(srv.URL)
	spec.Model = "qwen-b"
	step, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := newEnv(t, nil)
	err = step.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), `serves "qwen-a" (/v1/models), not the recipe's "qwen-b"`) {
		t.Errorf("Run: %v", err)
	}
}

// TestConfigServedModel: the spec's model is the served name the gate checks wherever the
// config is used (sglprov smoke, the daemon's canary).
func TestConfigServedModel(t *testing.T) {
	cfg, err := Spec{URL: "http://127.0.0.1:1", Model: "qwen"}.Config(nil)
	if err != nil || cfg.ServedModel != "qwen" || cfg.Model != "qwen" {
		t.Errorf("%+v %v", cfg, err)
	}
	if cfg, _ := (Spec{URL: "http://127.0.0.1:1"}).Config(nil); cfg.ServedModel != "" {
		t.Errorf("no model named, ServedModel %q", cfg.ServedModel)
	}
}

// TestRunSwitchJudgesItsOwnServer: the switch the daemon's rungs run (next profile,
// previous generation) gates the candidate against the names in its own unit: another
// server on the port (listing another model) fails it, and nothing is promoted.
func TestRunSwitchJudgesItsOwnServer(t *testing.T) {
	fs := newFakeService(t, []string{"a", "b"}, map[string]fakesglang.Mode{"a": fakesglang.ModeGood, "b": fakesglang.ModeGood})
	env, _ := newEnv(t, nil)
	cfg, err := testSpec(fs.srv.URL).Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	fs.served, fs.path = "qwen-b", "/models/b" // the server at the URL lists "qwen"
	res, results, err := gatedswitch.RunSwitch(context.Background(), env, fs, []string{"b"}, gatedswitch.SwitchGate{Config: cfg})
	var fe *switchover.FailedError
	if !errors.As(err, &fe) {
		t.Fatalf("RunSwitch: %v, want a failed switch", err)
	}
	if len(results) == 0 || !strings.Contains(results[0].Summary(), `not the recipe's "qwen-b"`) {
		t.Errorf("the candidate was not judged against its own served name: %+v", results)
	}
	if res.Winner != nil || len(fs.won) != 0 {
		t.Errorf("a candidate judged against another server won: %+v", res.Winner)
	}
}
