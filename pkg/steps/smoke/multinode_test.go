package smoke

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// groupWorker is a worker's service step: its own server answers SGLang's dummy /health
// (always 200, nothing else), and the head is another server.
type groupWorker struct {
	*fakeService
	head string
}

func (g *groupWorker) GroupHeadURL(env *engine.Env) (string, bool, error) {
	return g.head, env.Nodes != nil && env.Nodes.Rank > 0, nil
}
func (g *groupWorker) GroupRoute(*engine.Env) string { return "veth1 (link up, this node's address 10.77.0.2)" }

// TestWorkerAsksTheHead: a worker's apply passes when the head's server passes the gate,
// and never on its own dummy health; a head that never serves fails the worker naming the
// rendezvous and the likely causes; a worker whose own server dies fails at once.
func TestWorkerAsksTheHead(t *testing.T) {
	var ownHits atomic.Int32
	own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ownHits.Add(1) // SGLang's dummy health server of a rank >= 1: always 200
	}))
	defer own.Close()
	head := httptest.NewServer(fakesglang.New(fakesglang.Options{Model: "qwen"}))
	defer head.Close()
	nodes := &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000, JoinTimeout: 20 * time.Second}

	svc := &groupWorker{fakeService: newFakeService(t, []string{""}, map[string]fakesglang.Mode{"": fakesglang.ModeGood}), head: head.URL}
	env, _ := newEnv(t, map[string]engine.Step{"svc": svc})
	env.Nodes = nodes
	s, err := New("smoke", testSpec(own.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("worker with a serving head: %v", err)
	}
	if n := ownHits.Load(); n != 0 {
		t.Errorf("the worker asked its own dummy health server %d times", n)
	}
	if len(svc.won) != 1 {
		t.Errorf("won = %v, want the worker's unit kept once", svc.won)
	}

	// A head that never answers: the worker fails naming the rendezvous.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	svc.head = dead.URL
	env.Nodes = &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: "10.77.0.1", HeadPort: 20000, JoinTimeout: 2 * time.Second}
	err = s.Run(context.Background(), env)
	if !errors.Is(err, engine.ErrGate) {
		t.Fatalf("dead head: %v", err)
	}
	for _, want := range []string{"node rank 1 of 2: the group does not serve", "rendezvous 10.77.0.1:20000 through veth1",
		"the rendezvous port 20000 (and the 6 above it) closed or blocked by a firewall", "the wrong interface"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}

	// The worker's own server dies: the wait ends at once with its lines.
	svc.failedIn[""] = true
	svc.head = head.URL
	env.Nodes = nodes
	begin := time.Now()
	err = s.Run(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "Failed with result 'exit-code'") || time.Since(begin) > 10*time.Second {
		t.Fatalf("own server dead: %v after %s", err, time.Since(begin))
	}
}
