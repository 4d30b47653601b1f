package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/generation"
	"github.com/sglprov/sglprov/pkg/node"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/switchover"
	"github.com/sglprov/sglprov/test/fakesglang"
)

type svcSpec struct {
	Profiles []string `yaml:"profiles"`
}

// svcStep is a service step whose active profile is its recorded data, as the systemd
// step's is; activate records the profile it is given, Restart keeps it. It starts nothing.
type svcStep struct {
	spec      svcSpec
	activated []string
}

type svcData struct {
	Active string `json:"active"`
}

func (s *svcStep) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (s *svcStep) Intact(context.Context, *engine.Env) (bool, string, error) { return true, "", nil }
func (s *svcStep) Run(context.Context, *engine.Env) error                    { return nil }
func (s *svcStep) ServiceName() string                                       { return "sglang-n.service" }
func (s *svcStep) Candidates(*engine.Env) []string                           { return s.spec.Profiles }
func (s *svcStep) Active(env *engine.Env) string {
	var d svcData
	env.LoadData(&d)
	return d.Active
}
func (s *svcStep) Restart(context.Context, *engine.Env) error { return nil }
func (s *svcStep) activate(env *engine.Env, profile string) error {
	s.activated = append(s.activated, profile)
	return env.SaveData(svcData{Active: profile})
}
func (s *svcStep) Failed(context.Context) (bool, string, error) { return false, "", nil }
func (s *svcStep) Switch(context.Context, *engine.Env, []string) (*switchover.Switch, error) {
	return nil, errors.New("the test's service does not switch")
}
func (s *svcStep) Switched(context.Context, *engine.Env, *switchover.Result) error { return nil }

type plainStep struct{}

func (plainStep) Fingerprint(context.Context, *engine.Env) (map[string]string, error) {
	return nil, nil
}
func (plainStep) Intact(context.Context, *engine.Env) (bool, string, error) { return true, "", nil }
func (plainStep) Run(context.Context, *engine.Env) error                    { return nil }

func newEngine(t *testing.T, state, body string) (*engine.Engine, *svcStep) {
	t.Helper()
	var built *svcStep
	reg := engine.Registry{
		"svc":   engine.KindOf(func(_ string, s svcSpec) (*svcStep, error) { built = &svcStep{spec: s}; return built, nil }),
		"plain": engine.KindOf(func(_ string, _ svcSpec) (plainStep, error) { return plainStep{}, nil }),
	}
	r, err := recipe.Parse("n.yaml", []byte("apiVersion: sglprov/v1\nname: n\nsteps:\n"+body),
		recipe.KindSpecs{"svc": reg["svc"].NewSpec, "plain": reg["plain"].NewSpec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Recipe: r, Registry: reg, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, built
}

// TestChangeRecordsANewProfile: a change that moves the service to another profile is
// recorded in the state (the next apply and status see it); one that does not, is not;
// a recipe without a service has none to change.
func TestChangeRecordsANewProfile(t *testing.T) {
	state := t.TempDir()
	e, svc := newEngine(t, state, "  - name: service\n    svc: {profiles: [fast, safe]}\n")
	err := node.Change(e, func(s engine.BoundService) error {
		return s.Step.(*svcStep).activate(s.Env, "safe")
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := engine.LoadRecipeState(state, "n")
	if err != nil {
		t.Fatal(err)
	}
	var got svcData
	if st.Steps["service"] == nil || json.Unmarshal(st.Steps["service"].Data, &got) != nil || got.Active != "safe" {
		t.Errorf("recorded %+v, want the service's active profile safe", st.Steps["service"])
	}
	if len(svc.activated) != 1 {
		t.Errorf("activated %v", svc.activated)
	}

	// Nothing changed: nothing is written.
	other := t.TempDir()
	e2, _ := newEngine(t, other, "  - name: service\n    svc: {profiles: [fast]}\n")
	if err := node.Change(e2, func(engine.BoundService) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if st, err := engine.LoadRecipeState(other, "n"); err != nil || len(st.Steps) != 0 {
		t.Errorf("state after no change = %+v, %v; want nothing recorded", st, err)
	}

	e3, _ := newEngine(t, t.TempDir(), "  - name: build\n    plain: {}\n")
	if err := node.Change(e3, func(engine.BoundService) error { return nil }); !errors.Is(err, node.ErrNoService) {
		t.Errorf("Change without a service = %v, want ErrNoService", err)
	}
	if err := node.RollBack(context.Background(), e3, gate.Config{}); !errors.Is(err, node.ErrNoService) {
		t.Errorf("RollBack without a service = %v, want ErrNoService", err)
	}
}

// TestProfiles: a restart runs the active profile, else the first candidate; the next
// profile is the first candidate not tried, and with every one tried NextProfile says so
// and activates nothing.
func TestProfiles(t *testing.T) {
	e, svc := newEngine(t, t.TempDir(), "  - name: service\n    svc: {profiles: [fast, safe]}\n")
	s, _ := e.Service()
	if got := node.RestartProfile(s); got != "fast" {
		t.Errorf("RestartProfile with none active = %q, want fast", got)
	}
	if err := s.Step.(*svcStep).activate(s.Env, "safe"); err != nil {
		t.Fatal(err)
	}
	if got := node.RestartProfile(s); got != "safe" {
		t.Errorf("RestartProfile = %q, want the active safe", got)
	}
	if got := node.NextCandidate(s, []string{"fast"}); got != "safe" {
		t.Errorf("NextCandidate = %q, want safe", got)
	}
	svc.activated = nil
	if p, err := node.NextProfile(context.Background(), s, []string{"fast", "safe"}, gate.Config{}); !errors.Is(err, node.ErrNoCandidate) || p != "" {
		t.Errorf("NextProfile with every candidate tried = %q, %v", p, err)
	}
	if len(svc.activated) != 0 {
		t.Errorf("activated %v with nothing left to try", svc.activated)
	}
}

// TestPreviousWithNone: a store with no earlier generation that passed has none to go
// back to, and says which serves.
func TestPreviousWithNone(t *testing.T) {
	dir := t.TempDir()
	store, err := generation.Open(filepath.Join(dir, "gens"), engine.GenerationsRecordPath(filepath.Join(dir, "state"), "n"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if prev, err := node.Previous(store); !errors.Is(err, node.ErrNoPrevious) || prev != "" || err.Error() != "no earlier generation that passed (serving none)" {
		t.Errorf("Previous = %q, %v", prev, err)
	}
}

// listeningStep is svcStep whose unit names where its server listens
// (engine.ServerReader).
type listeningStep struct {
	svcStep
	srv switchover.Server
}

func (s *listeningStep) Serving(context.Context, *engine.Env) (switchover.Server, error) {
	return s.srv, nil
}

// TestRegateJudgesItsOwnServerWhereItListens: the regate rung gates the server at the
// host and port its own unit names, with its own names, not whatever answers at the
// recipe's gate URL (here a server that answers garbage).
func TestRegateJudgesItsOwnServerWhereItListens(t *testing.T) {
	own := httptest.NewServer(fakesglang.New(fakesglang.Options{Mode: fakesglang.ModeGood, Model: "qwen", ModelPath: "/models/qwen"}))
	t.Cleanup(own.Close)
	other := httptest.NewServer(fakesglang.New(fakesglang.Options{Mode: fakesglang.ModeBang, Model: "qwen", ModelPath: "/models/qwen"}))
	t.Cleanup(other.Close)
	u, err := url.Parse(own.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	step := &listeningStep{srv: switchover.Server{Unit: "sglang-n.service", ServedModel: "qwen", ModelPath: "/models/qwen",
		Host: "0.0.0.0", Port: port, Listens: true}}
	svc := &engine.BoundService{Name: "service", Step: step, Env: engine.NewTestEnv(t.TempDir(), io.Discard)}
	cfg := gate.Config{URL: other.URL, ReadyTimeout: 10 * time.Second, RequestTimeout: 5 * time.Second,
		PollInitial: 5 * time.Millisecond, PollMax: 20 * time.Millisecond, MaxTokens: 200}
	if err := node.Regate(context.Background(), svc, cfg); err != nil {
		t.Errorf("Regate of the server where its unit listens: %v", err)
	}
	// Its own names are checked there: a unit that serves another model fails.
	step.srv.ServedModel = "other-model"
	if err := node.Regate(context.Background(), svc, cfg); err == nil || !strings.Contains(err.Error(), "other-model") {
		t.Errorf("Regate of a server that lists another model: %v, want a failure naming the unit's model", err)
	}
}
