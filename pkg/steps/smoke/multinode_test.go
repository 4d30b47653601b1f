package smoke

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/exitcode"
	"github.com/sglprov/sglprov/pkg/recipe"
	"github.com/sglprov/sglprov/test/fakesglang"
)

// groupWorker is a worker's service step, which names its route to the head.
type groupWorker struct {
	*fakeService
}

func (g *groupWorker) GroupRoute(*engine.Env) string {
	return "veth1 (link up, this node's address 10.77.0.2)"
}

// headNodes is a two-node group whose head is the server at url.
func headNodes(t *testing.T, url string, join time.Duration) *recipe.NodesConfig {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	return &recipe.NodesConfig{Count: 2, Rank: 1, HeadHost: u.Hostname(), HeadPort: 20000, JoinTimeout: join}
}

// TestWorkerAsksTheHead: a worker's apply passes when the head's server passes the gate
// and its own server's /health answers (SGLang opens it once the worker joined), never on
// its own health alone; a head that never serves fails the worker naming the rendezvous
// and the likely causes; a worker whose own server dies or has not joined fails.
func TestWorkerAsksTheHead(t *testing.T) {
	head := httptest.NewServer(fakesglang.New(fakesglang.Options{Model: "qwen"}))
	defer head.Close()
	hu, _ := neturl.Parse(head.URL)
	// The worker's own server: SGLang's dummy health server of a rank >= 1, on the same
	// port at another address of this host.
	var ownHits, ownHealth atomic.Int32
	var ownStatus atomic.Int32
	ownStatus.Store(http.StatusOK)
	own := ownServer(t, head.URL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			ownHealth.Add(1)
			w.WriteHeader(int(ownStatus.Load()))
			return
		}
		ownHits.Add(1)
	}))

	svc := &groupWorker{fakeService: newFakeService(t, []string{""}, map[string]fakesglang.Mode{"": fakesglang.ModeGood})}
	env, _ := newEnv(t, map[string]engine.Step{"svc": svc})
	env.Nodes = headNodes(t, head.URL, 20*time.Second)
	s, err := New("smoke", testSpec(own.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("worker with a serving head: %v", err)
	}
	if n, h := ownHits.Load(), ownHealth.Load(); n != 0 || h != 1 {
		t.Errorf("the worker asked its own server %d times besides /health, and /health %d times; want its /health once, as the join's evidence", n, h)
	}
	if len(svc.won) != 1 {
		t.Errorf("won = %v, want the worker's unit kept once", svc.won)
	}

	// The head serves, but this node's server has not opened its health server: not joined.
	ownStatus.Store(http.StatusServiceUnavailable)
	if err := s.Run(context.Background(), env); !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), "the head serves, but this node's server has not joined the group at 127.0.0.1:20000: its /health at http://127.0.0.2:"+hu.Port()+"/health answers HTTP 503") {
		t.Errorf("own server not joined: %v", err)
	}
	ownStatus.Store(http.StatusOK)

	// A head that never answers: the worker fails naming the rendezvous.
	env.Nodes = headNodes(t, head.URL, 2*time.Second)
	env.Nodes.HeadHost = "127.0.0.3"
	err = s.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrGate) {
		t.Fatalf("dead head: %v", err)
	}
	for _, want := range []string{"node rank 1 of 2: the group does not serve", "rendezvous 127.0.0.3:20000 through veth1",
		"nothing listens at the rendezvous 127.0.0.3:20000 now (connection refused)",
		"the head's port 20000 (the rendezvous) closed or blocked by a firewall",
		"the ports NCCL and Gloo connect on blocked between the nodes (NCCL and Gloo listen on ephemeral ports on every node (net.ipv4.ip_local_port_range",
		"the wrong interface"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}

	// The worker's own server is not running: it has not joined.
	svc.failedIn[""] = true
	env.Nodes = headNodes(t, head.URL, 20*time.Second)
	err = s.Run(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "Failed with result 'exit-code'") {
		t.Fatalf("own server dead: %v", err)
	}
}

// TestWorkerJoinsOnlyItsOwnLaunch: a worker whose head serves but runs other arguments
// than the worker's unit (the head did not switch, or restored what served before) fails
// its gate naming the difference, and its switch restores what served before: a group
// switches whole or not at all on this node. With the head's own arguments (its rank
// aside) it passes. The arguments judged are the unit's own (its ExecStart=), so a
// restored unit is judged by what it runs, not by the recipe.
func TestWorkerJoinsOnlyItsOwnLaunch(t *testing.T) {
	// The fake service's units run "--model-path default --served-model-name qwen --profile".
	var headArgs atomic.Pointer[[]string]
	headArgs.Store(&[]string{"--model-path", "/other", "--served-model-name", "qwen", "--profile", "--node-rank", "0"})
	head := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fakesglang.New(fakesglang.Options{Model: "qwen", ModelPath: "default", ServerArgs: fakesglang.ServerArgsOf(*headArgs.Load())}).ServeHTTP(w, r)
	}))
	defer head.Close()
	own := ownServer(t, head.URL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	svc := &groupWorker{fakeService: newFakeService(t, []string{""}, map[string]fakesglang.Mode{"": fakesglang.ModeGood})}
	env, _ := newEnv(t, map[string]engine.Step{"svc": svc})
	env.Nodes = headNodes(t, head.URL, 20*time.Second)
	s, err := New("smoke", testSpec(own.URL))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), "runs other arguments than this node's server (--model-path: the head runs /other, this node default)") {
		t.Fatalf("worker of a head that runs other arguments: %v", err)
	}
	if len(svc.won) != 0 || svc.restored != 1 {
		t.Errorf("won %v, restored %d: want the candidate dropped and what served restored", svc.won, svc.restored)
	}
	headArgs.Store(&[]string{"--model-path", "default", "--served-model-name", "qwen", "--profile", "--node-rank", "0"})
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("worker with the head's arguments: %v", err)
	}
}

// TestWorkerRunsTheHeadsProfile: a worker applied while its head serves runs the profile
// the head runs (read from its /server_info), not its own first candidate.
func TestWorkerRunsTheHeadsProfile(t *testing.T) {
	head := httptest.NewServer(fakesglang.New(fakesglang.Options{Model: "qwen",
		ServerArgs: fakesglang.ServerArgsOf([]string{"--model-path", "default", "--served-model-name", "qwen", "--profile", "b", "--attention-backend", "flashinfer"})}))
	defer head.Close()
	own := ownServer(t, head.URL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	svc := &groupWorker{fakeService: newFakeService(t, []string{"a", "b"}, map[string]fakesglang.Mode{"a": fakesglang.ModeGood, "b": fakesglang.ModeGood})}
	env, _ := newEnv(t, map[string]engine.Step{"svc": svc})
	env.Nodes = headNodes(t, head.URL, 20*time.Second)
	env.Profiles = map[string]recipe.Profile{"a": {Args: []string{"--attention-backend", "triton"}}, "b": {Args: []string{"--attention-backend", "flashinfer"}}}
	s, err := New("smoke", testSpec(own.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(svc.won) != "[b]" {
		t.Errorf("won %v, want [b]: the head's profile", svc.won)
	}
}

// TestWorkerWaitsForTheHeadsLaunch: a worker's switch starts its candidate only once the
// head runs the candidate's command line. A head that serves other arguments all along
// fails the worker's apply naming the head and the order to apply in, with the worker's
// server left as it was (not restarted, nothing restored); a head that switches while the
// worker waits lets the candidate start after it, and the worker passes; a head whose
// server starts again (its API refuses, its rendezvous accepts), or whose group does not
// serve (its API answers 500), lets the candidate start and join it.
func TestWorkerWaitsForTheHeadsLaunch(t *testing.T) {
	// The fake service's units run "--model-path default --served-model-name qwen --profile P".
	oldArgs := []string{"--model-path", "default", "--served-model-name", "qwen", "--profile", "old", "--node-rank", "0"}
	newArgs := []string{"--model-path", "default", "--served-model-name", "qwen", "--profile", "new", "--node-rank", "0"}
	var headArgs atomic.Pointer[[]string]
	headArgs.Store(&oldArgs)
	var asked atomic.Int32
	var switchAt atomic.Int32 // the head switches at this /server_info (0: never)
	var startedBeforeHead atomic.Int32
	var svc *groupWorker
	head := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/server_info" {
			if n := asked.Add(1); n == switchAt.Load() {
				svc.mu.Lock()
				startedBeforeHead.Store(int32(len(svc.activated)))
				svc.mu.Unlock()
				headArgs.Store(&newArgs)
			}
		}
		fakesglang.New(fakesglang.Options{Model: "qwen", ModelPath: "default", ServerArgs: fakesglang.ServerArgsOf(*headArgs.Load())}).ServeHTTP(w, r)
	}))
	defer head.Close()
	own := ownServer(t, head.URL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	newWorker := func() (*groupWorker, *engine.Env) {
		w := &groupWorker{fakeService: newFakeService(t, []string{"new"}, map[string]fakesglang.Mode{"new": fakesglang.ModeGood, "old": fakesglang.ModeGood})}
		w.setActive("old") // what serves before the switch
		env, _ := newEnv(t, map[string]engine.Step{"svc": w})
		env.Nodes = headNodes(t, head.URL, 20*time.Second)
		return w, env
	}
	spec := testSpec(own.URL)
	spec.ReadyTimeout = "3s"
	s, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}

	// The head never runs the change.
	svc, env := newWorker()
	err = s.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), "the head 127.0.0.1 does not run this launch: apply the change on the head (rank 0) first or at the same time") ||
		!strings.Contains(err.Error(), "--profile: the head runs old, this node new") {
		t.Fatalf("head that never switches: %v", err)
	}
	if len(svc.activated) != 0 || svc.restored != 0 || len(svc.won) != 0 || svc.Active(nil) != "old" {
		t.Errorf("started %v, restored %d, won %v, active %q: want the worker's server left as it was", svc.activated, svc.restored, svc.won, svc.Active(nil))
	}

	// The head switches while the worker waits: the candidate starts after it.
	svc, env = newWorker()
	switchAt.Store(asked.Load() + 2)
	if err := s.Run(context.Background(), env); err != nil {
		t.Fatalf("head that switches meanwhile: %v", err)
	}
	if startedBeforeHead.Load() != 0 || fmt.Sprint(svc.won) != "[new]" {
		t.Errorf("%d starts before the head switched, won %v: want the candidate started after the head ran it, and kept", startedBeforeHead.Load(), svc.won)
	}

	// The head's server starts again: nothing answers on its API, its rendezvous accepts.
	rdv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rdv.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	svc, env = newWorker()
	env.Nodes = headNodes(t, deadURL, time.Second)
	env.Nodes.HeadPort = rdv.Addr().(*net.TCPAddr).Port
	spec.URL = "http://127.0.0.2:" + strings.TrimPrefix(deadURL, "http://127.0.0.1:")
	s2, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Run(context.Background(), env)
	if err == nil || strings.Contains(err.Error(), "does not run this launch") || len(svc.activated) == 0 || svc.activated[0] != "new" {
		t.Errorf("head starting again: started %v, %v: want the candidate started to join it", svc.activated, err)
	}

	// The head's group does not serve (a rank is gone: its API answers 500): nothing
	// serves to break, the candidate starts.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "NCCL error: remote process exited", http.StatusInternalServerError)
	}))
	defer broken.Close()
	svc, env = newWorker()
	env.Nodes = headNodes(t, broken.URL, time.Second)
	bu, _ := neturl.Parse(broken.URL)
	spec.URL = "http://127.0.0.2:" + bu.Port()
	s3, err := New("smoke", spec)
	if err != nil {
		t.Fatal(err)
	}
	err = s3.Run(context.Background(), env)
	if err == nil || strings.Contains(err.Error(), "does not run this launch") || len(svc.activated) == 0 || svc.activated[0] != "new" {
		t.Errorf("head whose group does not serve: started %v, %v: want the candidate started", svc.activated, err)
	}
}

// TestWorkerFollowsTheHeadsVerdict: when the group fails the gate while the head runs the
// worker's launch (a bad change both apply), the worker does not restore at once, which
// would break the group under the head's own gate: it waits until the head leaves the
// launch (its server starts again to restore), then fails and restores.
func TestWorkerFollowsTheHeadsVerdict(t *testing.T) {
	args := []string{"--model-path", "default", "--served-model-name", "qwen", "--profile", "p", "--node-rank", "0"}
	var svc *groupWorker
	var infos atomic.Int32
	restoredBeforeHeadLeft := make(chan int, 1)
	var head *httptest.Server
	head = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/server_info" && infos.Add(1) == 3 {
			// The head's switch fails and restarts its server: its API refuses from now.
			svc.mu.Lock()
			restoredBeforeHeadLeft <- svc.restored
			svc.mu.Unlock()
			go func() {
				head.Listener.Close()
				head.CloseClientConnections()
			}()
		}
		fakesglang.New(fakesglang.Options{Mode: fakesglang.ModeBang, Model: "qwen", ModelPath: "default", ServerArgs: fakesglang.ServerArgsOf(args)}).ServeHTTP(w, r)
	}))
	defer head.Close()
	own := ownServer(t, head.URL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	svc = &groupWorker{fakeService: newFakeService(t, []string{"p"}, map[string]fakesglang.Mode{"p": fakesglang.ModeGood})}
	env, _ := newEnv(t, map[string]engine.Step{"svc": svc})
	env.Nodes = headNodes(t, head.URL, 8*time.Second)
	s, err := New("smoke", testSpec(own.URL))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background(), env)
	if !errors.Is(err, exitcode.ErrGate) || !strings.Contains(err.Error(), "the head's server started again (its switch failed and restores what served before") {
		t.Fatalf("group failing the gate, then the head restarting: %v", err)
	}
	select {
	case n := <-restoredBeforeHeadLeft:
		if n != 0 {
			t.Errorf("the worker restored %d times before the head left the launch; want it to wait for the head", n)
		}
	default:
		t.Fatal("the worker did not watch the head after the group failed the gate")
	}
}

// ownServer starts a worker's own server (SGLang's dummy health server of a rank >= 1) on
// the head's port at another address of this host, 127.0.0.2, closed when the test ends;
// the test skips where that address cannot be listened on.
func ownServer(t *testing.T, headURL string, h http.Handler) *httptest.Server {
	t.Helper()
	hu, err := neturl.Parse(headURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", hu.Port()))
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	own := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	own.Start()
	t.Cleanup(own.Close)
	return own
}
