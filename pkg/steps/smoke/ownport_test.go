package smoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/gatedswitch"
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
		Replaces:   []string{m.replaced},
		// The fake's candidate answers where the test started it: its "side" port is that.
		StagePort: func(_ context.Context, srv switchover.Server) (int, error) { return srv.Port, nil }}, nil
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
	res, results, err := gatedswitch.RunSwitch(ctx, env, svc, []string{"p"}, gatedswitch.SwitchGate{Config: cfg})
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

// sideStagedService is modelSwitchService switching its own unit (no model switch), its
// candidate staged on the side port side.
type sideStagedService struct {
	*modelSwitchService
	side int
}

func (s *sideStagedService) Switch(context.Context, *engine.Env, []string) (*switchover.Switch, error) {
	return &switchover.Switch{Manager: s.units, StateDir: s.dir, Unit: s.ServiceName(),
		Candidates: []switchover.Candidate{{Profile: "p", Content: s.candidate}},
		StagePort:  func(context.Context, switchover.Server) (int, error) { return s.side, nil }}, nil
}

// TestRunSideStagedCandidateFailingOnTheServedPort: a candidate that passed on its side
// port and fails on the served port is not kept; the gate says which gate failed, and the
// unit that served comes back and passes.
func TestRunSideStagedCandidateFailingOnTheServedPort(t *testing.T) {
	listen := func() (net.Listener, int) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln, ln.Addr().(*net.TCPAddr).Port
	}
	serve := func(ln net.Listener, h http.Handler) *httptest.Server {
		s := httptest.NewUnstartedServer(h)
		s.Listener = ln
		s.Start()
		t.Cleanup(s.Close)
		return s
	}
	sideLn, side := listen()
	servedLn, served := listen()
	serve(sideLn, fakesglang.New(fakesglang.Options{Mode: fakesglang.ModeGood, Model: "new", ModelPath: "new"}))
	var onServed atomic.Pointer[http.Handler]
	servedSrv := serve(servedLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*onServed.Load()).ServeHTTP(w, r) }))
	answer := func(mode fakesglang.Mode, name string) {
		var h http.Handler = fakesglang.New(fakesglang.Options{Mode: mode, Model: name, ModelPath: name})
		onServed.Store(&h)
	}
	answer(fakesglang.ModeGood, "old")

	dir := t.TempDir()
	units := fakeunits.New(dir)
	// Who answers on the served port: the old server, or the candidate, broken there.
	units.OnStart = func(_ string, content []byte) {
		srv, err := switchover.Identify("u", content)
		switch {
		case err != nil || srv.Port != served:
		case srv.ModelPath == "new":
			answer(fakesglang.ModeBang, "new")
		default:
			answer(fakesglang.ModeGood, "old")
		}
	}
	ctx := context.Background()
	svc := &sideStagedService{modelSwitchService: &modelSwitchService{units: units, dir: dir,
		candidate: fmt.Appendf(nil, "[Service]\nExecStart=/bin/fake --model-path new --served-model-name new --port %d\n", served)}, side: side}
	old := fmt.Appendf(nil, "[Service]\nExecStart=/bin/fake --model-path old --served-model-name old --port %d\n", served)
	if _, err := units.Install(ctx, svc.ServiceName(), old); err != nil {
		t.Fatal(err)
	}
	if err := units.Start(ctx, svc.ServiceName()); err != nil {
		t.Fatal(err)
	}
	step, err := New("smoke", testSpec(servedSrv.URL))
	if err != nil {
		t.Fatal(err)
	}
	env, out := newEnv(t, map[string]engine.Step{"sglang-service": svc})
	err = step.Run(ctx, env)
	if !errors.Is(err, exitcode.ErrGate) {
		t.Fatalf("Run: %v, want a failed gate\n%s", err, out)
	}
	for _, want := range []string{fmt.Sprintf("p: passed on port %d, then on the served port: FAIL", side), "was restored and passed the gate again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run: %v\nwant %q", err, want)
		}
	}
	if !bytes.Equal(units.Running(svc.ServiceName()), old) {
		t.Errorf("after the failed switch %s runs %q, want the old unit", svc.ServiceName(), units.Running(svc.ServiceName()))
	}
}
