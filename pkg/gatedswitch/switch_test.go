package gatedswitch

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/gate"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/pkg/switchover"
)

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

// TestProbeRendezvous: a rendezvous that listens, and one that refuses, are told apart.
func TestProbeRendezvous(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if got := probeRendezvous(context.Background(), addr); !strings.Contains(got, "accepts connections now: the head runs") {
		t.Errorf("listening: %s", got)
	}
	ln.Close()
	if got := probeRendezvous(context.Background(), addr); !strings.Contains(got, "nothing listens at the rendezvous "+addr) {
		t.Errorf("closed: %s", got)
	}
}

// ownService is a service step whose server is read from its unit (engine.ServerReader),
// or, with no reader, named by its active profile (modelService).
type ownService struct {
	engine.ServiceStep
	srv switchover.Server
}

func (s *ownService) ServiceName() string { return "sglang.service" }
func (s *ownService) Failed(context.Context) (bool, string, error) {
	return true, "own unit", nil
}
func (s *ownService) Serving(context.Context, *engine.Env) (switchover.Server, error) {
	return s.srv, nil
}

type modelService struct {
	engine.ServiceStep
}

func (modelService) Failed(context.Context) (bool, string, error) { return false, "", nil }
func (modelService) ServedModel(*engine.Env) (string, string, error) {
	return "qwen", "/models/qwen", nil
}

// TestOwnServer: the daemon's whole-gate rung judges the service's own server: the names
// and address its unit runs with when it can be read, else the names under its active
// profile at the recipe's URL; its unit's failure ends the wait either way.
func TestOwnServer(t *testing.T) {
	base := gate.Config{URL: "http://127.0.0.1:30000", ServedModel: "recipe-name"}
	svc := &ownService{srv: switchover.Server{Unit: "sglang.service", ServedModel: "served", ModelPath: "/m",
		Host: "0.0.0.0", Port: 30001, Listens: true}}
	cfg, err := OwnServer(context.Background(), nil, svc, base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL != "http://127.0.0.1:30001" || cfg.ServedModel != "served" || cfg.ModelPath != "/m" {
		t.Errorf("reader: %+v, want the unit's names at its port", cfg)
	}
	if failed, lines, _ := cfg.Failed(context.Background()); !failed || lines != "own unit" {
		t.Errorf("reader: Failed = %v %q, want the unit's own", failed, lines)
	}
	cfg, err = OwnServer(context.Background(), nil, modelService{}, base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL != base.URL || cfg.ServedModel != "qwen" || cfg.ModelPath != "/models/qwen" || cfg.Failed == nil {
		t.Errorf("model server: %+v, want the profile's names at the recipe's URL", cfg)
	}
}

// TestWorkerOnly: the worker's gate and its wait for the head exist on a worker of a
// group only; the head and a node with no group gate as one node does.
func TestWorkerOnly(t *testing.T) {
	for name, n := range map[string]*recipe.NodesConfig{"no group": nil,
		"head": {Count: 2, Rank: 0, HeadHost: "10.0.0.1", HeadPort: 20000}} {
		env := &engine.Env{Nodes: n}
		if WorkerGate(env, modelService{}) != nil || AwaitHead(env, time.Second) != nil {
			t.Errorf("%s: a worker's gate or wait", name)
		}
	}
	env := &engine.Env{Nodes: &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.0.0.1", HeadPort: 20000}}
	if WorkerGate(env, modelService{}) == nil || AwaitHead(env, time.Second) == nil {
		t.Error("a worker has no worker's gate or wait")
	}
}
