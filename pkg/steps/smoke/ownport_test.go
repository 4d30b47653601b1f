package smoke

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/pkg/switchover/fakeunits"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// modelSwitchService is a ServiceStep whose switch replaces another recipe's unit (a
// model switch) over a fake of systemd's units; each unit names its own port.
type modelSwitchService struct {
	units     *fakeunits.Manager
	dir       string
	candidate []byte
	replaced  string
}

func (m *modelSwitchService) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (m *modelSwitchService) Intact(context.Context, *engine.Env) (bool, string, error) {
	return true, "", nil
}
func (m *modelSwitchService) Run(context.Context, *engine.Env) error { return nil }
func (m *modelSwitchService) ServiceName() string                    { return "sglang-new.service" }
func (m *modelSwitchService) Candidates(*engine.Env) []string        { return []string{"p"} }
func (m *modelSwitchService) Active(*engine.Env) string              { return "" }
func (m *modelSwitchService) Restart(ctx context.Context, _ *engine.Env) error {
	return switchover.RestartServing(ctx, m.units, m.dir, m.ServiceName())
}
func (m *modelSwitchService) Failed(context.Context) (bool, string, error) { return false, "", nil }
func (m *modelSwitchService) Switch(context.Context, *engine.Env, []string) (*switchover.Switch, error) {
	return &switchover.Switch{Manager: m.units, StateDir: m.dir, Unit: m.ServiceName(),
		Candidates: []switchover.Candidate{{Profile: "p", Content: m.candidate}},
		Replaces:   []string{m.replaced}}, nil
}
func (m *modelSwitchService) Switched(context.Context, *engine.Env, *switchover.Result) error {
	return nil
}

// TestRunSwitchGatesEachUnitAtItsOwnPort: a model switch whose candidate fails its gate
// restores the replaced recipe's unit, which listens on another port (on every address);
// that unit is gated at its own port, passes, and the node serves again, though the
// recipe's URL names the candidate's port.
func TestRunSwitchGatesEachUnitAtItsOwnPort(t *testing.T) {
	newSrv := httptest.NewServer(fakesglang.New(fakesglang.Options{Mode: fakesglang.ModeWrong, Model: "new", ModelPath: "new"}))
	t.Cleanup(newSrv.Close)
	oldSrv := httptest.NewServer(fakesglang.New(fakesglang.Options{Mode: fakesglang.ModeGood, Model: "old", ModelPath: "old"}))
	t.Cleanup(oldSrv.Close)
	port := func(s *httptest.Server) string {
		u, err := url.Parse(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		return u.Port()
	}

	dir := t.TempDir()
	units := fakeunits.New(dir)
	ctx := context.Background()
	old := fmt.Appendf(nil, "[Service]\nExecStart=/bin/fake --model-path old --served-model-name old --host 0.0.0.0 --port %s\n", port(oldSrv))
	if _, err := units.Install(ctx, "sglang-old.service", old); err != nil {
		t.Fatal(err)
	}
	if err := units.Start(ctx, "sglang-old.service"); err != nil {
		t.Fatal(err)
	}
	svc := &modelSwitchService{units: units, dir: dir, replaced: "sglang-old.service",
		candidate: fmt.Appendf(nil, "[Service]\nExecStart=/bin/fake --model-path new --served-model-name new --port %s\n", port(newSrv))}

	env, _ := newEnv(t, nil)
	cfg, err := testSpec(newSrv.URL + "/").Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	res, results, err := RunSwitch(ctx, env, svc, []string{"p"}, SwitchGate{Config: cfg})
	var fe *switchover.FailedError
	if !errors.As(err, &fe) {
		t.Fatalf("RunSwitch: %v, want a failed switch", err)
	}
	if len(results) != 2 || results[0].Pass {
		t.Fatalf("gates %+v, want the candidate's failed then the restored one's", results)
	}
	if !res.Replaced || !res.Restored || res.RestoredVerdict == nil || !res.RestoredVerdict.Pass || !res.Serving() {
		t.Errorf("the restored unit was not judged at its own port: restored %v, verdict %+v", res.Restored, res.RestoredVerdict)
	}
}

// TestServerURL: the unit's host and port replace the recipe URL's, a wildcard host is
// reached on loopback, and the scheme, credentials and path stay.
func TestServerURL(t *testing.T) {
	for _, tt := range []struct {
		base string
		srv  switchover.Server
		want string
	}{
		{"http://127.0.0.1:30000/", switchover.Server{Host: "0.0.0.0", Port: 30001, Listens: true}, "http://127.0.0.1:30001/"},
		{"https://u:p@localhost:30000/api", switchover.Server{Host: "::", Port: 8000, Listens: true}, "https://u:p@[::1]:8000/api"},
		{"http://127.0.0.1:30000", switchover.Server{Host: "10.0.0.7", Port: 30000, Listens: true}, "http://10.0.0.7:30000"},
		{"http://127.0.0.1:31000", switchover.Server{Host: "127.0.0.1", Port: 30000}, "http://127.0.0.1:31000"},
	} {
		if got := ServerURL(tt.base, tt.srv); got != tt.want {
			t.Errorf("ServerURL(%q, %+v) = %q, want %q", tt.base, tt.srv, got, tt.want)
		}
	}
}
